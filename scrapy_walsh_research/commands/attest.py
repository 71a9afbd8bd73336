"""``scrapy walsh-attest``: the attestation JSON, built from evidence."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler

from scrapy_walsh_research.attestation import attest
from scrapy_walsh_research.commands._runner import (
    project_targets_spider,
    run_conformance_blocking,
)
from scrapy_walsh_research.preflight import apply_addons

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

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        # The settings in effect: the project's, the spider's, then its add-ons.
        crawler = Crawler(project_targets_spider(self.settings), self.settings)
        apply_addons(crawler)  # a refused configuration is reported, not raised
        report = run_conformance_blocking(self.settings) if opts.conformance else None
        doc = attest(crawler.settings, report)
        print(json.dumps(doc, indent=2))
        self.exitcode = 0 if all(doc["requirements"].values()) else 1
