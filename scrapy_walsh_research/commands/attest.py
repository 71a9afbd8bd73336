"""``scrapy walsh-attest``: the attestation JSON, built from evidence; with
``--sign``, as a JWS signed with ``WALSH_ATTESTATION_KEY``; with ``--verify
FILE --jwks FILE_OR_URL``, a signed attestation checked against published keys."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._runner import (
    project_targets_spider,
    run_conformance_blocking,
)
from scrapy_walsh_research.evidence.attestation import attest, holds
from scrapy_walsh_research.settings.check import apply_addons

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False}

    def short_desc(self) -> str:
        return "Print the Walsh-Research attestation for this project, from evidence"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--conformance", action="store_true", help="also run the sandbox conformance check"
        )
        parser.add_argument(
            "--sign", action="store_true",
            help="print the attestation as a JWS signed with WALSH_ATTESTATION_KEY",
        )  # fmt: skip
        parser.add_argument("--verify", metavar="FILE", help="check a signed attestation")
        parser.add_argument(
            "--jwks", metavar="FILE_OR_URL",
            help="the published attestation keys (/.well-known/walsh-research/keys)",
        )  # fmt: skip

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if opts.verify:
            self._verify(opts)
            return
        from scrapy_walsh_research.identity import signed_attestation  # not on every scrapy run
        from scrapy_walsh_research.settings.signing import attestation_key

        key = attestation_key(self.settings) if opts.sign else None
        # The settings in effect: the project's, the spider's, then its add-ons.
        crawler = Crawler(project_targets_spider(self.settings), self.settings)
        apply_addons(crawler)  # a refused configuration is reported, not raised
        result = run_conformance_blocking(self.settings) if opts.conformance else None
        doc = attest(crawler.settings, result)
        if key is not None:
            print(signed_attestation.sign_attestation(doc, key))
        else:
            print(json.dumps(doc, indent=2))
        self.exitcode = 0 if holds(doc) else 1

    def _verify(self, opts: argparse.Namespace) -> None:
        from scrapy_walsh_research.identity import signed_attestation

        if not opts.jwks:
            raise UsageError("--verify needs --jwks FILE_OR_URL (the published attestation keys)")
        try:
            with open(opts.verify) as handle:
                token = handle.read()
            doc = signed_attestation.verify_attestation(
                token, signed_attestation.load_jwks(opts.jwks)
            )
        except (OSError, ValueError) as exc:
            print(f"NOT VERIFIED: {exc}", file=sys.stderr)
            self.exitcode = 1
            return
        print(json.dumps(doc, indent=2))
        print(f"verified: signed by a key in {opts.jwks}", file=sys.stderr)
