"""The attestation: every requirement's value comes from evidence.

The JSON shape of the earlier tool's attestation (tool, version, spec,
user_agent, requirements), plus a hash of the effective settings and, per
requirement, the evidence: the components enabled and their order, the
settings in effect, and (optionally) the rows of a conformance run. A
requirement without evidence is ``false``, with the reason.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy_walsh_research import __version__, components
from scrapy_walsh_research.core.contract import SPEC_VERSION, USER_AGENT
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import check, defaults
from scrapy_walsh_research.settings.options import declared_purposes, operator_urls
from scrapy_walsh_research.settings.signing import request_signer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from scrapy_walsh_research.evidence.verdicts import ConformanceResult

#: requirement key -> (rule word in start-up problems, components, conformance row ids)
REQUIREMENTS: dict[str, tuple[str, list[str], set[str]]] = {
    "R1_exact_user_agent": ("R1", [components.USERAGENT_MW], {"R1"}),
    "R2_robots_rfc9309": ("R2", [components.ROBOTS_MW], {"R2", "R2d"}),
    "R2a_named_group_overrides_star": ("R2", [components.ROBOTS_MW], {"R2a"}),
    "R3_operator_blocklist": ("R3", [components.BLOCKLIST_MW], {"R3"}),
    "R3a_apex_and_subdomain_match": ("R3", [components.BLOCKLIST_MW], {"R3a"}),
    "R3b_retain_last_list_on_failure": ("R3", [components.BLOCKLIST_MW], {"R3b"}),
    "R3c_schema_validation": ("R3", [components.BLOCKLIST_MW], {"R3c"}),
    "R4_serial_rate_limit_crawl_delay": ("R4", [components.PACING_MW], {"R4", "R4c"}),
    "R5_backoff_jitter_retry_after": ("R5", [components.RETRY_MW], {"R5"}),
    "R6_no_recursion_metadata_only": (
        "R6",
        [components.SCOPE_MW, components.SCOPE_SPIDER_MW],
        {"R6", "REC"},
    ),
    "R7_conditional_fetch_dedup": ("R7", [components.VALIDATORS_MW], {"R7", "R7b"}),
    "R8_infrequent_runs": ("R8", [components.CADENCE_MW], {"R8"}),
    "R9_no_html_scrape": ("R9", [components.NEGOTIATION_MW], {"R9"}),
    "PREF_usage_preferences": ("PREF", [components.PREFERENCES_MW], {"PREF"}),
}
#: Problems that are not about one rule's gate but break the named ones.
_SHARED = {
    "CONCURRENT_REQUESTS": "R4",
    "WALSH_MIN_DELAY": "R4",
    "REDIRECT_MAX_TIMES": "R6",
    "WALSH_PURPOSES": "R6",
    "WALSH_BLOCKLIST": "R3",
    "WALSH_ROBOTS": "R2",
    "ROBOTSTXT_OBEY": "R2",
    "RETRY_ENABLED": "R5",
    "User-Agent": "R1",
}


def _plain(value: Any) -> Any:
    """A JSON-able, address-free rendering of a setting value, for the hash."""
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, type):
        return components.name_of(value)
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}"
    return type(value).__name__


def settings_hash(settings: BaseSettings) -> str:
    data = _plain(settings.copy_to_dict())
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _enabled(settings: BaseSettings) -> dict[str, int]:
    return {
        components.name_of(cls): order
        for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES")
        for cls, order in components.enabled(settings, name).items()
    }


def attest(settings: BaseSettings, result: ConformanceResult | None = None) -> dict[str, Any]:
    enabled = _enabled(settings)
    problems = check.problems(settings)
    blocklist, unprotected = _blocklist(settings)
    requirements: dict[str, bool] = {}
    evidence: dict[str, Any] = {}
    for key, (rule, gates, rows) in REQUIREMENTS.items():
        reasons = [p for p in problems if p.split(" ", 2)[:2] and _concerns(p, rule)]
        missing = [c for c in gates if c not in enabled]
        reasons += [f"{c} is not enabled" for c in missing if not any(c in r for r in reasons)]
        if (
            rule == "R8"
            and settings.getfloat("WALSH_RUN_INTERVAL", defaults.WALSH_RUN_INTERVAL) < 86400
        ):
            reasons.append(
                f"WALSH_RUN_INTERVAL={settings.getfloat('WALSH_RUN_INTERVAL')} is below a day"
            )
        if key == "R3_operator_blocklist":
            reasons += unprotected
        item: dict[str, Any] = {
            "components": {c: enabled.get(c) for c in gates},
            "conformance": "not run (pass --conformance)",
        }
        if result is not None:
            judged = [c for c in result.checks if c.id in rows]
            item["conformance"] = [
                {"check": c.title, "passed": c.passed, "measured": c.measured} for c in judged
            ]
            if not judged:
                reasons.append("the conformance run has no check for it")
            reasons += [
                f"conformance check failed: {c.title} ({c.measured})"
                for c in judged
                if not c.passed
            ]
        requirements[key] = not reasons
        if reasons:
            item["reason"] = reasons
        evidence[key] = item
    attributed = {p for p in problems if any(_concerns(p, r) for r, _, _ in REQUIREMENTS.values())}
    return {
        "tool": "scrapy-walsh-research",
        "version": __version__,
        "spec": SPEC_VERSION,
        "user_agent": USER_AGENT,
        "settings_sha256": settings_hash(settings),
        "purposes": _purposes(settings),
        "blocklist": blocklist,
        "requirements": requirements,
        "evidence": evidence,
        # what the start-up check refuses that no requirement above names:
        # the crawl would not run, so the configuration attests nothing
        "refused": [p for p in problems if p not in attributed],
        # every MUST row of the run, not only the rows a requirement reads
        # (the audit log, purge on opt-out, the signatures)
        "conformance_must_pass": result.must_pass if result is not None else None,
        "identity": _identity(settings),
    }


def holds(doc: dict[str, Any]) -> bool:
    """Whether an attestation says the bot keeps the contract: every
    requirement true, nothing refused, and every MUST row of its
    conformance run (when there was one) passed."""
    return (
        all(doc["requirements"].values())
        and not doc["refused"]
        and doc["conformance_must_pass"] is not False
    )


def _blocklist(settings: BaseSettings) -> tuple[dict[str, Any], list[str]]:
    """The operator blocklist the bot honours (its URL and its schema's),
    and why R3 cannot be attested when they do not come over https: nothing
    then protects the list's integrity, and anyone on the path could drop an
    opt-out from it (or, through the schema, keep a new list from adoption)."""
    url, schema_url = operator_urls(settings)
    named = {"WALSH_BLOCKLIST_URL": url, "WALSH_BLOCKLIST_SCHEMA_URL": schema_url}
    plain = [f"{k}={v!r}" for k, v in named.items() if urlsplit(v).scheme.lower() != "https"]
    doc: dict[str, Any] = {"url": url, "schema_url": schema_url, "https": not plain}
    if not plain:
        return doc, []
    if settings.getbool("WALSH_BLOCKLIST_ALLOW_HTTP"):
        why = (
            f"{' and '.join(plain)}: not https (WALSH_BLOCKLIST_ALLOW_HTTP=True, for a local "
            "sandbox), so nothing protects the list's integrity: anyone on the path can "
            "remove an opt-out"
        )
    else:
        why = f"{' and '.join(plain)}: not https, so the blocklist gate refuses to start"
    return doc, [why]


def _purposes(settings: BaseSettings) -> list[str] | dict[str, str]:
    """What the bot declares it does with what it fetches (WALSH_PURPOSES):
    the purposes sites' usage preferences are honoured for; a refused value
    is reported, not raised (the attestation describes a refusal)."""
    try:
        return list(declared_purposes(settings))
    except WalshConfigurationError as exc:
        return {"refused": str(exc)}


def _identity(settings: BaseSettings) -> dict[str, Any]:
    """Whether requests are signed (Web Bot Auth), and as whom: from the key
    itself, not from the setting alone."""
    if not settings.get("WALSH_SIGNING_KEY"):
        return {"signed": False, "reason": "WALSH_SIGNING_KEY is not set: requests are unsigned"}
    try:
        signer = request_signer(settings)
    except Exception as exc:  # reported, not raised: the attestation describes a refusal
        return {"signed": False, "reason": str(exc)}
    assert signer is not None
    return {
        "signed": True,
        "keyid": signer.keyid,
        "signature_agent": signer.agent,
        "signature_agent_form": signer.form,
        "covered": list(signer.covered),
        "ttl_seconds": signer.ttl,
    }


def _concerns(problem: str, rule: str) -> bool:
    if f"{rule} gate" in problem or f"{rule} guard" in problem or f"{rule} requires" in problem:
        return True
    return any(word in problem and owner == rule for word, owner in _SHARED.items())
