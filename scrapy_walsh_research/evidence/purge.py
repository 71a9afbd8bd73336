"""Purge on opt-out: when a host opts out, what the bundle stored about it goes.

"Opt-out without cleanup is a half-measure" (seed 003): once a blocklist
entry covering a host is adopted, or the host's robots.txt disallows the
product token for ``/``, the validators, first-seen links and entries and
the cadence stored for its targets are deleted at once (in a fleet, the
records stored for its fed lines keep only the line and its outcome), and the
purge is an audit entry naming its cause. ``scrapy walsh-purge HOST`` does the same on
demand. Records already exported (``-O``, ``FEEDS``) are the user's files:
the audit log's decisions show which lines were exported, and when.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import host_variants, in_domain
from scrapy_walsh_research.state.namespaces import PER_TARGET, key_host

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.statscollectors import StatsCollector

    from scrapy_walsh_research.evidence.audit import AuditTrail
    from scrapy_walsh_research.state.protocols import StateStore

logger = logging.getLogger(__name__)

#: what is stored per target URL (keys start with the target's URL)
NAMESPACES = PER_TARGET


def stored_host(key: str) -> str | None:
    return key_host(key)


def host_argument(text: str, what: str = "HOST") -> str:
    """A host name given on the command line, normalised as the crawl
    stores hosts (lower case, IDNA, no trailing dot), or UsageError."""
    from scrapy.exceptions import UsageError

    from scrapy_walsh_research.core.urls import is_ip, normalize_host

    raw = text.strip()
    host = normalize_host(raw) if raw and not any(c in raw for c in "/?#@%*") else ""
    if host and is_ip(host):
        return host
    if not host or "." not in host or ":" in raw:
        raise UsageError(
            f"{what} takes one host name without scheme, port or path, e.g. example.org "
            f"(got {text!r})"
        )
    return host


def spellings(host: str) -> set[str]:
    """Every name the crawl may have stored *host* under: ``faß.test`` is
    both ``xn--fa-hia.test`` (the target's key) and ``fass.test`` (the host
    Scrapy contacted), as an R3 entry names both."""
    return host_variants(host) or {host.lower().rstrip(".")}


def covers(domain: str) -> Callable[[str], bool]:
    """Whether a host is *domain* or a subdomain of it, in any spelling."""
    names = spellings(domain)
    return lambda host: any(in_domain(host, name) for name in names)


def is_host(host: str) -> Callable[[str], bool]:
    """Whether a host is *host*, in any spelling (no subdomain)."""
    names = spellings(host)
    return lambda other: other in names


async def purge(
    store: StateStore,
    matches: Callable[[str], bool],
    *,
    cause: str | Callable[[str], str],
    audit: AuditTrail | None = None,
    only: str | None = None,
    stats: StatsCollector | None = None,
) -> dict[str, dict[str, int]]:
    """Delete everything stored about the hosts *matches* accepts:
    {host: {namespace: keys deleted}}; each purged host gets an audit entry
    naming *cause* (or ``cause(host)``: the blocklist entry that covers it).
    Given *only* one host, only its keys (in each of its spellings) are read
    instead of the whole store; a host's keys go at once (in Redis, its
    hashes)."""
    purged: dict[str, dict[str, int]] = {}
    onlies: list[str | None] = [None] if only is None else [*sorted(spellings(only))]
    for namespace in NAMESPACES:
        hosts = await store.hosts(namespace) if only is None else onlies
        for host in sorted(h for h in hosts if h is not None and matches(h)):
            gone = await store.forget(namespace, host)
            if gone:
                counts = purged.setdefault(host, {})
                counts[namespace] = counts.get(namespace, 0) + gone
    at = utc_iso(store.time())
    why_for = cause if callable(cause) else (lambda host: cause)
    for name in onlies:
        fed = await store.purge_records(matches, why_for, at, name)
        for host, counts in fed.items():
            purged.setdefault(host, {}).update(counts)
    for host, counts in sorted(purged.items()):
        why = cause(host) if callable(cause) else cause
        logger.info(
            "Purged what was stored about %(host)s (%(counts)s): %(cause)s",
            {"host": host, "counts": counts, "cause": why},
        )
        if stats is not None:
            stats.inc_value("walsh/purge/hosts")
            stats.inc_value("walsh/purge/entries", sum(counts.values()))
        if audit is not None:
            await audit.purged(host, why, counts)
    return purged


def total(purged: dict[str, dict[str, Any]]) -> int:
    return sum(sum(c.values()) for c in purged.values())
