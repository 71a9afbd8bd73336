"""The signed identity a conformance run uses, when the project signs
(``WALSH_SIGNING_KEY``).

The sandbox crawls sign with a key made for the run (the project's real key
never signs sandbox traffic), under the project's other signature settings;
the sandbox origin verifies every request with its own verifier
(:mod:`scrapy_walsh_research.sandbox.verify`). The rows that read its
verdicts are :mod:`scrapy_walsh_research.conformance.checks.signatures`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from scrapy_walsh_research.identity.signing import Signer, generate_key, public_jwk
from scrapy_walsh_research.sandbox.verify import Verifier
from scrapy_walsh_research.settings.signing import request_signer

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings

    from scrapy_walsh_research.sandbox import SandboxServer


@dataclass
class Identity:
    """The run's key (at *key_path*) and its signer; *base* is the project's
    settings, *work* the run's directory."""

    key_path: Path
    signer: Signer
    base: Settings
    work: Path

    @classmethod
    def for_run(cls, base: Settings, work: Path, server: SandboxServer) -> Identity | None:
        """None unless the project signs with a usable configuration (an
        unusable one is refused by the crawls themselves, with the reason)."""
        try:
            signer = request_signer(base)  # None when WALSH_SIGNING_KEY is unset
        except Exception:
            return None
        if signer is None:
            return None
        work.mkdir(parents=True, exist_ok=True)
        key_path = work / "conformance-signing.pem"
        key = generate_key(key_path)
        settings = base.copy()
        settings.set("WALSH_SIGNING_KEY", str(key_path), priority="cmdline")
        signer = request_signer(settings)
        assert signer is not None
        jwk = public_jwk(key)
        server.origin.verifier = Verifier({jwk["kid"]: jwk["x"]})
        return cls(key_path, signer, base, work)
