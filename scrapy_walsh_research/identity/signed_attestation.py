"""The attestation, signed: a JWS (RFC 7515) over its RFC 8785 canonical JSON.

Anyone holding the published attestation keys (a JWKS at
``/.well-known/walsh-research/keys``) can check that the operator's
attestation is the one the operator's key signed, byte for byte, without
trusting whoever hands it over. The key is ``WALSH_ATTESTATION_KEY``, never
the request-signing key: a key serves one purpose (read and checked in
``settings/signing.py``: this module reads no settings).

``alg`` is ``EdDSA`` with an Ed25519 key (RFC 8037), what JOSE verifiers in
the field accept today; RFC 9864's fully specified ``Ed25519`` is accepted
when verifying too. JWS and canonical JSON are joserfc's and rfc8785's.
"""

from __future__ import annotations

import json
import urllib.request
import warnings
from typing import TYPE_CHECKING, Any, cast

import rfc8785
from cryptography.hazmat.primitives import serialization
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, OKPKey

from scrapy_walsh_research.identity.signing import public_jwk

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from joserfc.jwk import KeySetSerialization

TYP = "walsh-attestation+jws"
ALGORITHMS = ["EdDSA", "Ed25519"]


class AttestationInvalid(ValueError):
    """The attestation does not verify against the published keys."""


def _jose_key(key: Ed25519PrivateKey) -> OKPKey:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # joserfc types its constructors' ``Self`` in a way mypy reads as Any
    jose_key: OKPKey = OKPKey.import_key(pem)
    return jose_key


def sign_attestation(doc: dict[str, Any], key: Ed25519PrivateKey) -> str:
    """The compact JWS of the attestation *doc*'s canonical JSON."""
    header = {"alg": "EdDSA", "kid": public_jwk(key)["kid"], "typ": TYP}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # joserfc flags EdDSA per RFC 9864; see module doc
        payload = rfc8785.dumps(doc)
        return jws.serialize_compact(header, payload, _jose_key(key), algorithms=["EdDSA"])


def load_jwks(source: str) -> dict[str, Any]:
    """A JWKS from a file or an https URL (a command, not the crawl: blocking is fine)."""
    if source.startswith("https://"):
        with urllib.request.urlopen(source, timeout=30) as answer:
            data = answer.read()
    elif source.startswith("http://"):
        raise AttestationInvalid(f"{source}: the keys must come over https")
    else:
        with open(source, "rb") as handle:
            data = handle.read()
    jwks: dict[str, Any] = json.loads(data)  # any other shape: verify_attestation refuses it
    return jwks


def verify_attestation(token: str, jwks: dict[str, Any]) -> dict[str, Any]:
    """The attestation in *token* if a key of *jwks* signed it, else
    :class:`AttestationInvalid` saying why."""
    try:
        # the shape is import_key_set's to check: what it refuses is caught here
        keys = KeySet.import_key_set(cast("KeySetSerialization", jwks))
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise AttestationInvalid(f"not a usable JWKS ({exc})") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = jws.deserialize_compact(token.strip(), keys, algorithms=ALGORITHMS)
    except (JoseError, ValueError) as exc:
        raise AttestationInvalid(f"the signature does not verify ({exc})") from exc
    doc: dict[str, Any] = json.loads(obj.payload)
    if rfc8785.dumps(doc) != obj.payload:
        raise AttestationInvalid("the signed payload is not canonical JSON (RFC 8785)")
    return doc
