"""The sandbox origin's Web Bot Auth verifier.

Written apart from the signer on purpose: the signer uses the
``http-message-signatures`` library (and ``http-sf`` under it); this parses
the three fields by hand and builds the RFC 9421 signature base itself, so a
bug shared by both sides cannot make a bad signature look good. It covers
what the bundle sends (string members, an inner list of components with
parameters), not all of RFC 8941.
"""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

_TOKEN = r"[A-Za-z*][A-Za-z0-9_.:/%*-]*|[a-z*][a-z0-9_.*-]*"
_KEY = re.compile(r"[a-z*][a-z0-9_.*-]*")
_STRING = re.compile(r'"((?:[^"\\]|\\["\\])*)"')
_INT = re.compile(r"-?[0-9]{1,15}")
_BYTES = re.compile(r":([A-Za-z0-9+/=]*):")


class Unparsable(ValueError):
    pass


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _bare(text: str, i: int) -> tuple[Any, int]:
    if m := _STRING.match(text, i):
        return m.group(1).replace('\\"', '"').replace("\\\\", "\\"), m.end()
    if m := _BYTES.match(text, i):
        return base64.b64decode(m.group(1)), m.end()
    if m := _INT.match(text, i):
        return int(m.group()), m.end()
    if text.startswith("?1", i) or text.startswith("?0", i):
        return text[i + 1] == "1", i + 2
    if m := re.compile(_TOKEN).match(text, i):
        return ("token", m.group()), m.end()
    raise Unparsable(f"unexpected {text[i : i + 10]!r}")


def _params(text: str, i: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    while i < len(text) and text[i] == ";":
        i += 1
        while i < len(text) and text[i] == " ":
            i += 1
        m = _KEY.match(text, i)
        if not m:
            raise Unparsable("bad parameter name")
        name, i = m.group(), m.end()
        value: Any = True
        if i < len(text) and text[i] == "=":
            value, i = _bare(text, i + 1)
        out[name] = value
    return out, i


def parse_dictionary(text: str) -> dict[str, tuple[Any, dict[str, Any], str]]:
    """{key: (value, params, raw member text)}; an inner list's value is a
    list of (item, params)."""
    out: dict[str, tuple[Any, dict[str, Any], str]] = {}
    text = text.strip()
    i = 0
    while i < len(text):
        m = _KEY.match(text, i)
        if not m:
            raise Unparsable(f"bad dictionary key at {i}")
        key, i = m.group(), m.end()
        if i >= len(text) or text[i] != "=":
            raise Unparsable("dictionary member without a value")
        start = i = i + 1
        value: Any
        if text[i] == "(":
            items: list[tuple[Any, dict[str, Any]]] = []
            i += 1
            while True:
                while text[i] == " ":
                    i += 1
                if text[i] == ")":
                    i += 1
                    break
                item, i = _bare(text, i)
                params, i = _params(text, i)
                items.append((item, params))
            value = items
        else:
            value, i = _bare(text, i)
        params, i = _params(text, i)
        out[key] = (value, params, text[start:i])
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text):
            if text[i] != ",":
                raise Unparsable(f"expected ',' at {i}")
            i += 1
            while i < len(text) and text[i] in " \t":
                i += 1
    return out


def _sf_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class Verifier:
    """Checks signed requests against published keys ({kid: x}); remembers
    nonces, so a repeated one fails."""

    keys: dict[str, str]
    tag: str = "web-bot-auth"
    skew: float = 5.0
    nonces: set[str] = field(default_factory=set)

    def verify(
        self,
        method: str,
        scheme: str,
        authority: str,
        target: str,
        headers: dict[str, str],
        now: float | None = None,
    ) -> str:
        """ "verified", "unsigned", or "invalid: <why>" for one request as the
        origin received it (*headers* with lower-case names)."""
        if "signature-input" not in headers and "signature" not in headers:
            return "unsigned"
        try:
            return self._verify(method, scheme, authority, target, headers, now)
        except Unparsable as exc:
            return f"invalid: unparsable ({exc})"

    def _verify(
        self,
        method: str,
        scheme: str,
        authority: str,
        target: str,
        headers: dict[str, str],
        now: float | None,
    ) -> str:
        # One pass in the order a verifier works (RFC 9421 §3.2: parameters,
        # key, covered components, signature base, signature), each refusal
        # next to the step it belongs to: long, but read top to bottom.
        now = time.time() if now is None else now
        inputs = parse_dictionary(headers.get("signature-input", ""))
        signatures = parse_dictionary(headers.get("signature", ""))
        if len(inputs) != 1:
            return f"invalid: {len(inputs)} signatures (expected one)"
        ((label, (covered, params, raw)),) = inputs.items()
        if label not in signatures or not isinstance(signatures[label][0], bytes):
            return f"invalid: no Signature for label {label}"
        if params.get("tag") != self.tag:
            return f"invalid: tag {params.get('tag')!r}"
        if params.get("alg", "ed25519") != "ed25519":
            return f"invalid: alg {params.get('alg')!r}"
        created, expires = params.get("created"), params.get("expires")
        if not isinstance(created, int) or not isinstance(expires, int):
            return "invalid: created and expires are required"
        if created > now + self.skew:
            return "invalid: created in the future"
        if expires <= now:
            return "invalid: expired"
        nonce = params.get("nonce")
        if not isinstance(nonce, str) or not nonce:
            return "invalid: no nonce"
        x = self.keys.get(str(params.get("keyid")))
        if x is None:
            return f"invalid: unknown keyid {params.get('keyid')!r}"
        names = [(c, p) for c, p in covered]
        if ("@authority", {}) not in names:
            return "invalid: @authority not covered"
        agent = headers.get("signature-agent")
        if agent is None:
            return "invalid: no Signature-Agent"
        lines = []
        agent_covered = False
        for component, cparams in names:
            if not isinstance(component, str):
                return "invalid: component is not a string"
            if component == "@authority":
                host = authority.lower()
                default = {"http": ":80", "https": ":443"}[scheme]
                value = host.removesuffix(default)
            elif component == "@method":
                value = method.upper()
            elif component == "@path":
                value = target.split("?", 1)[0] or "/"
            elif component == "@target-uri":
                value = f"{scheme}://{authority.lower()}{target}"
            elif component == "signature-agent" and "key" in cparams:
                members = parse_dictionary(agent)
                if cparams["key"] not in members:
                    return f"invalid: Signature-Agent has no member {cparams['key']}"
                member = members[cparams["key"]][0]
                if not isinstance(member, str):
                    return "invalid: Signature-Agent member is not a string"
                value = _sf_string(member)
                agent_covered = True
            elif component == "signature-agent" and not cparams:
                value = agent.strip()
                agent_covered = True
            else:
                return f"invalid: unexpected component {component!r}"
            suffix = "".join(f";{k}={_sf_string(v)}" for k, v in cparams.items())
            lines.append(f"{_sf_string(component)}{suffix}: {value}")
        if not agent_covered:
            return "invalid: signature-agent not covered"
        if nonce in self.nonces:
            return "invalid: nonce repeated"
        lines.append(f'"@signature-params": {raw}')
        base = "\n".join(lines).encode()
        try:
            Ed25519PublicKey.from_public_bytes(_b64url(x)).verify(signatures[label][0], base)
        except InvalidSignature:
            return "invalid: signature does not verify"
        self.nonces.add(nonce)
        return "verified"


def verify_directory(authority: str, body: bytes, headers: dict[str, str]) -> dict[str, str]:
    """{kid: "verified" | "invalid: <why>"} for a key directory response: the
    body's keys, the Content-Digest over the body, and each key's possession
    signature over ``("@authority";req "content-digest")``."""
    import hashlib
    import json

    lower = {k.lower(): v for k, v in headers.items()}
    digest = "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode() + ":"
    keys = {k.get("kid"): k for k in json.loads(body).get("keys", [])}
    out: dict[str, str] = {}
    inputs = parse_dictionary(lower.get("signature-input", ""))
    signatures = parse_dictionary(lower.get("signature", ""))
    for kid, jwk in keys.items():
        out[str(kid)] = "invalid: no possession signature"
        if "d" in jwk:
            out[str(kid)] = "invalid: the private key is published"
            continue
        for label, (covered, params, raw) in inputs.items():
            if params.get("keyid") != kid:
                continue
            if lower.get("content-digest") != digest:
                out[str(kid)] = "invalid: Content-Digest does not match the body"
            elif params.get("tag") != "http-message-signatures-directory":
                out[str(kid)] = f"invalid: tag {params.get('tag')!r}"
            elif [(c, p) for c, p in covered] != [("@authority", {"req": True}),
                                                  ("content-digest", {})]:  # fmt: skip
                out[str(kid)] = "invalid: covers the wrong components"
            else:
                base = (
                    f'"@authority";req: {authority.lower()}\n'
                    f'"content-digest": {digest}\n"@signature-params": {raw}'
                )
                try:
                    Ed25519PublicKey.from_public_bytes(_b64url(jwk["x"])).verify(
                        signatures[label][0], base.encode()
                    )
                    out[str(kid)] = "verified"
                except (InvalidSignature, KeyError, ValueError):
                    out[str(kid)] = "invalid: signature does not verify"
    return out
