"""Conformance rows for signed identity (Web Bot Auth), when the project
signs (``WALSH_SIGNING_KEY``).

The sandbox crawls sign with a key made for the run (the project's real key
never signs sandbox traffic), under the project's other signature settings;
the sandbox origin verifies every request with its own verifier
(:mod:`scrapy_walsh_research.sandbox.verify`). The key directory and a
signed attestation are made and checked the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.identity.signing import (
    Signer,
    directory_response,
    generate_key,
    public_jwk,
)
from scrapy_walsh_research.sandbox.verify import Verifier, parse_dictionary, verify_directory

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings

    from scrapy_walsh_research.conformance.check import Report, Run
    from scrapy_walsh_research.sandbox import SandboxServer

BLOCKLIST_PATH = "/.well-known/walsh-research/blocklist.json"
SCHEMA_PATH = "/.well-known/walsh-research/blocklist.schema.json"


@dataclass
class Identity:
    key_path: Path
    signer: Signer
    base: Settings
    work: Path

    @classmethod
    def for_run(cls, base: Settings, work: Path, server: SandboxServer) -> Identity | None:
        """None unless the project signs with a usable configuration (an
        unusable one is refused by the crawls themselves, with the reason)."""
        if not base.get("WALSH_SIGNING_KEY"):
            return None
        try:
            Signer.from_settings(base)
        except Exception:
            return None
        work.mkdir(parents=True, exist_ok=True)
        key_path = work / "conformance-signing.pem"
        key = generate_key(key_path)
        settings = base.copy()
        settings.set("WALSH_SIGNING_KEY", str(key_path), priority="cmdline")
        signer = Signer.from_settings(settings)
        assert signer is not None
        jwk = public_jwk(key)
        server.origin.verifier = Verifier({jwk["kid"]: jwk["x"]})
        return cls(key_path, signer, base, work)

    def judge(self, report: Report, runs: list[Run]) -> None:
        from scrapy_walsh_research.conformance.check import Check

        hits = [h for run in runs for h in run.hits]

        def add(title: str, passed: bool, measured: str) -> None:
            report.checks.append(Check("ID", "MUST", title, bool(passed), measured))

        verdicts = Counter(h.signature for h in hits)
        kinds = {
            "robots.txt": sum(h.path == "/robots.txt" for h in hits),
            "blocklist": sum(h.path == BLOCKLIST_PATH for h in hits),
            "schema": sum(h.path == SCHEMA_PATH for h in hits),
            "hops": sum(h.host == "moved.test" and h.path == "/new" for h in hits),
            "retries": sum(h.host == "limit.test" and h.path == "/busy" for h in hits) - 1,
        }
        bad = [f"{h.host}{h.path}: {h.signature}" for h in hits if h.signature != "verified"]
        add(
            "every request verified at the origin (targets, robots.txt, blocklist, schema, "
            "redirect hops, retries)",
            not bad and all(n > 0 for n in kinds.values()),
            f"{verdicts['verified']}/{len(hits)} verified; "
            + ", ".join(f"{k} {n}" for k, n in kinds.items())
            + (f"; first failure {bad[0]}" if bad else ""),
        )
        margins, early, nonces = [], [], []
        for h in hits:
            parsed = parse_dictionary(h.headers.get("signature-input", ""))
            for _, params, _ in parsed.values():
                margins.append(params.get("expires", 0) - h.wall)
                early.append(params.get("created", 0) - h.wall)
                nonces.append(params.get("nonce"))
        add(
            "signatures fresh on arrival: expires not passed, created not in the future",
            bool(margins) and min(margins) > 0 and max(early) <= 1,
            f"least time left {min(margins, default=0):.1f} s; created at most "
            f"{max(early, default=0):+.1f} s from arrival",
        )
        repeated = len(nonces) - len(set(nonces))
        add(
            "no nonce repeated",
            bool(nonces) and repeated == 0,
            f"{len(set(nonces))} distinct nonces in {len(nonces)} signatures",
        )
        agents = Counter(h.headers.get("signature-agent") for h in hits)
        covered = self.signer.covered[1]
        covers = sum(covered in h.headers.get("signature-input", "") for h in hits)
        add(
            f"Signature-Agent in the configured form ({self.signer.form}) and covered",
            set(agents) == {self.signer.agent_header} and covers == len(hits),
            f"{agents[self.signer.agent_header]}/{len(hits)} sent {self.signer.agent_header}; "
            f"{covers} cover {covered}",
        )
        now = int(time.time())
        body, headers = directory_response(
            [self.signer.key], self.signer.agent, created=now, expires=now + 86400
        )
        directory = verify_directory(urlsplit(self.signer.agent).netloc, body, headers)
        add(
            "key directory: kid equals the keyid; its response signature verifies",
            directory == {self.signer.keyid: "verified"},
            f"{directory}",
        )
        add("signed attestation verifies, and fails once a byte changes", *self._attestation())

    def _attestation(self) -> tuple[bool, str]:
        from scrapy_walsh_research.evidence.attestation import attest
        from scrapy_walsh_research.identity import signed_attestation

        key = generate_key(self.work / "conformance-attestation.pem")
        doc = attest(self.base)
        token = signed_attestation.sign_attestation(doc, key)
        jwks = {"keys": [public_jwk(key)]}
        try:
            good = signed_attestation.verify_attestation(token, jwks) == doc
        except signed_attestation.AttestationInvalid as exc:
            return False, f"does not verify: {exc}"
        head, payload, sig = token.split(".")
        flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
        try:
            signed_attestation.verify_attestation(".".join([head, flipped, sig]), jwks)
        except signed_attestation.AttestationInvalid:
            return good, "verifies; refused with one byte changed"
        return False, "a changed attestation still verified"
