"""The request signer the ``WALSH_SIGN*`` settings ask for.

The settings are read and checked here, so the start-up check refuses a
bot that meant to sign and could not (an unreadable key, a plain-http key
directory) before any request; :mod:`scrapy_walsh_research.identity`
signs, and reads no settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.identity.signing import (
    EXTRA_COMPONENTS,
    FORMS,
    MIN_TTL_S,
    Signer,
    load_key,
    public_x,
)
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.options import list_setting

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from scrapy.settings import BaseSettings


def request_signer(settings: BaseSettings) -> Signer | None:
    """The signer the settings ask for, or None (signing off); a
    :class:`WalshConfigurationError` naming the setting to change."""
    path = settings.get("WALSH_SIGNING_KEY")
    if not path:
        return None
    key = load_key(path)
    agent = settings.get("WALSH_SIGNATURE_AGENT") or defaults.WALSH_SIGNATURE_AGENT
    parts = urlsplit(agent)
    if parts.scheme != "https" or not parts.hostname or '"' in agent or "\\" in agent:
        raise WalshConfigurationError(
            f"WALSH_SIGNATURE_AGENT={agent!r}: the key directory must be an https URL "
            "(verifiers fetch it over TLS)"
        )
    form = settings.get("WALSH_SIGNATURE_AGENT_FORM") or defaults.WALSH_SIGNATURE_AGENT_FORM
    if form not in FORMS:
        raise WalshConfigurationError(
            f"WALSH_SIGNATURE_AGENT_FORM={form!r}: use one of {', '.join(FORMS)}"
        )
    raw_ttl = settings.get("WALSH_SIGNATURE_TTL")
    try:
        unset = raw_ttl is None or raw_ttl == ""
        ttl = float(defaults.WALSH_SIGNATURE_TTL if unset else raw_ttl)
    except (TypeError, ValueError) as exc:
        raise WalshConfigurationError(
            f"WALSH_SIGNATURE_TTL={raw_ttl!r}: whole seconds, e.g. 60"
        ) from exc
    if ttl != int(ttl) or not MIN_TTL_S <= ttl <= 86400:
        raise WalshConfigurationError(
            f"WALSH_SIGNATURE_TTL={raw_ttl!r}: whole seconds between {MIN_TTL_S} and 86400 "
            "(the protocol recommends expiry within 24 hours; shorter limits replay, but "
            "the signature must outlive a TLS handshake)"
        )
    extra = tuple(list_setting(settings, "WALSH_SIGNATURE_COMPONENTS"))
    unknown = [c for c in extra if c not in EXTRA_COMPONENTS]
    if unknown:
        raise WalshConfigurationError(
            f"WALSH_SIGNATURE_COMPONENTS: {', '.join(unknown)} not allowed; choose from "
            f"{', '.join(EXTRA_COMPONENTS)}"
        )
    return Signer(key, agent=agent, form=form, ttl=ttl, extra=tuple(dict.fromkeys(extra)))


def attestation_key(settings: BaseSettings) -> Ed25519PrivateKey:
    """The key ``scrapy walsh-attest --sign`` signs with (``WALSH_ATTESTATION_KEY``),
    refused when unset or when it is the request-signing key."""
    path = settings.get("WALSH_ATTESTATION_KEY")
    if not path:
        raise WalshConfigurationError(
            "--sign needs WALSH_ATTESTATION_KEY: an Ed25519 key of its own (`scrapy walsh-keys "
            "generate attestation.pem`), published at /.well-known/walsh-research/keys"
        )
    key = load_key(path, "WALSH_ATTESTATION_KEY")
    signing = settings.get("WALSH_SIGNING_KEY")
    if signing and public_x(load_key(signing)) == public_x(key):
        raise WalshConfigurationError(
            "WALSH_ATTESTATION_KEY is the request-signing key (WALSH_SIGNING_KEY): keys are "
            "not reused across purposes; generate a second one for attestations"
        )
    return key
