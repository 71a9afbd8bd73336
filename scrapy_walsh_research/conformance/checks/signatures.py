"""ID: signed identity (Web Bot Auth), when the project signs
(``WALSH_SIGNING_KEY``).

The sandbox crawls sign with a key made for the run
(:mod:`scrapy_walsh_research.conformance.identity`), and the sandbox origin
verifies every request with its own verifier
(:mod:`scrapy_walsh_research.sandbox.verify`): these rows read its verdicts
and the signature parameters it received. The key directory and a signed
attestation are made and checked the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy_walsh_research.conformance.scenario import BLOCKLIST_PATH, SCHEMA_PATH
from scrapy_walsh_research.evidence.attestation import attest
from scrapy_walsh_research.identity import signed_attestation
from scrapy_walsh_research.identity.signing import directory_response, generate_key, public_jwk
from scrapy_walsh_research.sandbox.verify import parse_dictionary, verify_directory

if TYPE_CHECKING:
    from scrapy_walsh_research.conformance.checks.base import Judgement, Observed
    from scrapy_walsh_research.conformance.identity import Identity
    from scrapy_walsh_research.identity.signing import Signer
    from scrapy_walsh_research.sandbox.origin import Hit


def signatures(j: Judgement, seen: Observed) -> None:
    identity = seen.identity
    if identity is None:
        # (a key that cannot sign: every crawl was refused, saying why)
        if not seen.signing_key_set:
            j.note(
                "requests are unsigned (WALSH_SIGNING_KEY is not set); set it to sign every "
                "request (Web Bot Auth) and to check the signatures here"
            )
        return
    signer = identity.signer
    hits = [h for run in seen.crawls for h in run.hits]

    def row(title: str, result: tuple[bool, str]) -> None:
        j.add("ID", "MUST", title, bool(result[0]), result[1])

    row(
        "every request verified at the origin (targets, robots.txt, blocklist, schema, "
        "redirect hops, retries)",
        _verified(hits),
    )
    row("signatures fresh on arrival: expires not passed, created not in the future", _fresh(hits))
    row("no nonce repeated", _nonces(hits))
    row(f"Signature-Agent in the configured form ({signer.form}) and covered", _agent(hits, signer))
    row("key directory: kid equals the keyid; its response signature verifies", _directory(signer))
    row("signed attestation verifies, and fails once a byte changes", _attestation(identity))


def _verified(hits: list[Hit]) -> tuple[bool, str]:
    verdicts = Counter(h.signature for h in hits)
    kinds = {
        "robots.txt": sum(h.path == "/robots.txt" for h in hits),
        "blocklist": sum(h.path == BLOCKLIST_PATH for h in hits),
        "schema": sum(h.path == SCHEMA_PATH for h in hits),
        "hops": sum(h.host == "moved.test" and h.path == "/new" for h in hits),
        "retries": sum(h.host == "limit.test" and h.path == "/busy" for h in hits) - 1,
    }
    bad = [f"{h.host}{h.path}: {h.signature}" for h in hits if h.signature != "verified"]
    return not bad and all(n > 0 for n in kinds.values()), (
        f"{verdicts['verified']}/{len(hits)} verified; "
        + ", ".join(f"{k} {n}" for k, n in kinds.items())
        + (f"; first failure {bad[0]}" if bad else "")
    )


def _parameters(hits: list[Hit]) -> list[tuple[Hit, dict[str, Any]]]:
    """Each signature's parameters, with the request that carried it."""
    out: list[tuple[Hit, dict[str, Any]]] = []
    for h in hits:
        for _, params, _ in parse_dictionary(h.headers.get("signature-input", "")).values():
            out.append((h, params))
    return out


def _fresh(hits: list[Hit]) -> tuple[bool, str]:
    margins, early = [], []
    for h, params in _parameters(hits):
        margins.append(params.get("expires", 0) - h.wall)
        early.append(params.get("created", 0) - h.wall)
    return bool(margins) and min(margins) > 0 and max(early) <= 1, (
        f"least time left {min(margins, default=0):.1f} s; created at most "
        f"{max(early, default=0):+.1f} s from arrival"
    )


def _nonces(hits: list[Hit]) -> tuple[bool, str]:
    nonces = [params.get("nonce") for _, params in _parameters(hits)]
    repeated = len(nonces) - len(set(nonces))
    return bool(nonces) and repeated == 0, (
        f"{len(set(nonces))} distinct nonces in {len(nonces)} signatures"
    )


def _agent(hits: list[Hit], signer: Signer) -> tuple[bool, str]:
    agents = Counter(h.headers.get("signature-agent") for h in hits)
    covered = signer.covered[1]
    covers = sum(covered in h.headers.get("signature-input", "") for h in hits)
    return set(agents) == {signer.agent_header} and covers == len(hits), (
        f"{agents[signer.agent_header]}/{len(hits)} sent {signer.agent_header}; "
        f"{covers} cover {covered}"
    )


def _directory(signer: Signer) -> tuple[bool, str]:
    now = int(time.time())
    body, headers = directory_response([signer.key], signer.agent, created=now, expires=now + 86400)
    directory = verify_directory(urlsplit(signer.agent).netloc, body, headers)
    return directory == {signer.keyid: "verified"}, f"{directory}"


def _attestation(identity: Identity) -> tuple[bool, str]:
    """The project's attestation signed with a key made for the run: it
    verifies against that key's JWKS, and one changed byte is refused."""
    key = generate_key(identity.work / "conformance-attestation.pem")
    doc = attest(identity.base)
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
