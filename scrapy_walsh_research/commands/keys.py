"""``scrapy walsh-keys``: make a signing key, and what to publish for it.

* ``generate PATH``: a new Ed25519 key, written 0600; prints its keyid.
* ``directory [--out DIR] [--also OLD.pem ...]``: the key directory served at
  ``WALSH_SIGNATURE_AGENT`` (the JWKS of ``WALSH_SIGNING_KEY``, plus older
  keys while a rotation overlaps) and the response headers the web server
  must send, one possession signature per key; with ``--out``, as files for
  a static host.
* ``attestation-keys``: the JWKS of ``WALSH_ATTESTATION_KEY``, published at
  ``/.well-known/walsh-research/keys``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._operator import OperatorCommand
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.identity.signing import (
    directory_response,
    generate_key,
    load_key,
    public_jwk,
)

if TYPE_CHECKING:
    import argparse

#: how long the directory's possession signatures last: well beyond any
#: republication interval (the draft: a short expiry buys nothing here)
DIRECTORY_VALID_DAYS = 90


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "generate PATH | directory [--out DIR] [--also OLD.pem] | attestation-keys"

    def short_desc(self) -> str:
        return "Generate a Web Bot Auth signing key; print the key directory to publish"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--out", help="directory: write the body and headers here")
        parser.add_argument(
            "--also", action="append", default=[], metavar="KEY",
            help="directory: also publish this (older) key, while a rotation overlaps",
        )  # fmt: skip
        parser.add_argument(
            "--valid-days", type=int, default=DIRECTORY_VALID_DAYS,
            help="directory: days the possession signatures stay valid",
        )  # fmt: skip

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if not args:
            raise UsageError("say what to do: generate PATH, directory or attestation-keys")
        try:
            self._run(args, opts)
        except WalshConfigurationError as exc:  # a key that cannot be read: say so, no traceback
            raise UsageError(str(exc), print_help=False) from None

    def _run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if args[0] == "generate" and len(args) == 2:
            self._generate(Path(args[1]))
            return
        if args[0] == "directory" and len(args) == 1:
            self._directory(opts)
            return
        if args[0] == "attestation-keys" and len(args) == 1:
            path = self.walsh.attestation_key
            if not path:
                raise UsageError("set WALSH_ATTESTATION_KEY (-s WALSH_ATTESTATION_KEY=PATH)")
            jwks = {"keys": [{**public_jwk(load_key(path, "WALSH_ATTESTATION_KEY")), "use": "sig"}]}
            print(json.dumps(jwks, separators=(",", ":")))
            return
        raise UsageError(f"unknown: {' '.join(args)}; see scrapy walsh-keys -h")

    @staticmethod
    def _generate(path: Path) -> None:
        """A new key at *path*; its folder is made (0700) if missing, as
        ``generate keys/walsh.pem`` in a fresh project expects."""
        cannot = f"cannot write a key to {path}"
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise UsageError(f"{cannot}: {path.parent} is not a folder") from None
        except OSError as exc:
            raise UsageError(f"{cannot}: {exc.strerror or exc}") from None
        try:
            key = generate_key(path)
        except FileExistsError:
            raise UsageError(f"{path} exists: a key is never overwritten") from None
        except OSError as exc:
            raise UsageError(f"{cannot}: {exc.strerror or exc}") from None
        print(f"{path}: new Ed25519 key (0600), keyid {public_jwk(key)['kid']}")

    def _directory(self, opts: argparse.Namespace) -> None:
        assert self.settings is not None
        path = self.walsh.signing_key
        if not path:
            raise UsageError("set WALSH_SIGNING_KEY (-s WALSH_SIGNING_KEY=PATH)")
        keys = [load_key(path)] + [load_key(p, "--also") for p in opts.also]
        agent = self.walsh.signature_agent
        created = int(time.time())
        body, headers = directory_response(
            keys, agent, created=created, expires=created + opts.valid_days * 86400
        )
        lines = [f"{name}: {value}" for name, value in headers.items()]
        if opts.out:
            out = Path(opts.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "http-message-signatures-directory").write_bytes(body)
            (out / "http-message-signatures-directory.headers").write_text("\n".join(lines) + "\n")
        print(f"# serve at {agent}, with these response headers:")
        print("\n".join(lines))
        print("\n# body (exactly these bytes, no trailing newline):")
        print(body.decode())
