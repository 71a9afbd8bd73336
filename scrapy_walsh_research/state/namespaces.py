"""The state-store namespaces more than one component names, each written
once, and how long each keeps what is written to it.

A namespace is where one kind of state lives in the store (a SQLite
``namespace`` column; in Redis, one hash per namespace and host,
:mod:`.redis.layout`). These are kept per target URL or per origin and read
or written by several components: the gate that owns each, the Redis store
that keeps them per host for as long as :func:`retention` says, the Redis
script that writes a fed line's record with its cadence
(:mod:`.redis.target_queue`), and the purge on opt-out
(:mod:`scrapy_walsh_research.evidence.purge`). Renaming one loses what is
stored under it.
"""

from __future__ import annotations

from scrapy_walsh_research.core.urls import is_http_url, url_host
from scrapy_walsh_research.settings.walsh import WalshSettings

#: R8: each target's last fetch (state.cadence)
CADENCE = "cadence"
#: R8 with a fleet: which worker is fetching a target now (state.redis.cadence)
CADENCE_CLAIMS = "cadence_claims"
#: R7: each target's ETag and Last-Modified (gates.validators)
VALIDATORS = "validators"
#: when each feed entry and markdown link was first seen, per target (the targets spider)
SEEN = "seen"
#: when each target last answered 2xx or 304 (gates.sitemaps): what a
#: sitemap's <lastmod> is compared with
ANSWERED = "target_answered"
#: per origin and sitemap (``<origin>\t<sitemap URL>``): its validators and
#: lastmod table (documents.sitemap_documents)
SITEMAP_DOCUMENTS = "sitemap_documents"
#: per origin: until when its sitemaps are not used, and why (gates.sitemaps)
SITEMAP_TRUST = "sitemap_trust"
#: per origin: how many of its targets answered in its last run (gates.sitemaps)
SITEMAP_HISTORY = "sitemap_history"
#: the secret the bundle's own requests are marked with, one per store (_runtime.marks)
INTERNAL = "internal"
#: per origin, with a fleet's feed: which line of which fed run probes its
#: /llms.txt (the targets spider), so the fleet probes it once per run
LLMS_PROBES = "llms_probes"
#: what is stored per target URL, or per origin (keys start with the target's
#: URL or its origin): what a purge deletes
PER_TARGET = (
    VALIDATORS,
    SEEN,
    CADENCE,
    ANSWERED,
    SITEMAP_DOCUMENTS,
    SITEMAP_TRUST,
    SITEMAP_HISTORY,
    LLMS_PROBES,
)

#: R2: the last 2xx robots.txt per origin: reused within WALSH_POLICY_TTL by
#: every run and worker (RFC 9309 §2.4 allows caching up to 24 h), and as the
#: last good copy for LAST_GOOD_MAX_AGE when robots.txt is unreachable
ROBOTS = "robots"
#: R2: the last 4xx answer per origin (no rules apply), reused the same way
ROBOTS_4XX = "robots_4xx"
#: R2: the last failed fetch per origin and when to try again, so a restart
#: or another worker keeps the backoff instead of fetching at once
ROBOTS_UNREACHABLE = "robots_unreachable"
#: usage preferences: the last tdmrep.json answer per origin (a 2xx body or a 4xx status)
TDMREP = "tdmrep"
#: usage preferences: the last failed tdmrep.json fetch per origin, and its next try
TDMREP_UNREACHABLE = "tdmrep_unreachable"

#: a last good robots.txt or tdmrep.json is used for this long while the
#: document is unreachable (RFC 9309 §2.3.1.4's 30 days), so it is kept so long
LAST_GOOD_MAX_AGE = 30 * 86400.0

#: every namespace keyed by a URL or an origin: what Redis keeps per host,
#: each for :func:`retention`'s time after it was last written
BY_HOST = (
    *PER_TARGET, CADENCE_CLAIMS,
    ROBOTS, ROBOTS_4XX, ROBOTS_UNREACHABLE, TDMREP, TDMREP_UNREACHABLE,
)  # fmt: skip


def retention(settings: WalshSettings | None = None) -> dict[str, float]:
    """How long (seconds) each namespace of :data:`BY_HOST` keeps an entry
    after it was last written: ``WALSH_STATE_TTL``, and never less than what
    reads it needs. A target's cadence is in force for ``WALSH_RUN_INTERVAL``;
    a sitemap verdict for ``WALSH_SITEMAP_DISTRUST``/``WALSH_SITEMAP_STALE``;
    a robots.txt or tdmrep.json copy is the last good one for
    :data:`LAST_GOOD_MAX_AGE`; a stored sitemap for ``WALSH_SITEMAP_TTL``; a
    failed fetch's backoff runs up to ``WALSH_POLICY_TTL``. Whatever is still
    in use is written again within that time (a 304 rewrites a target's
    validators, a feed rewrites the entries it still lists)."""

    walsh = settings if settings is not None else WalshSettings.at_defaults()
    base = walsh.state_ttl
    policy = walsh.policy_ttl
    floors = {
        CADENCE: walsh.run_interval,
        SITEMAP_TRUST: max(walsh.sitemap_distrust, walsh.sitemap_stale),
        SITEMAP_DOCUMENTS: walsh.sitemap_ttl,
        ROBOTS: LAST_GOOD_MAX_AGE,
        ROBOTS_4XX: policy,
        TDMREP: LAST_GOOD_MAX_AGE,
        ROBOTS_UNREACHABLE: policy,
        TDMREP_UNREACHABLE: policy,
    }
    return {name: max(base, floors.get(name, 0.0)) for name in BY_HOST}


def key_host(key: str) -> str | None:
    """The host a stored key is about: its URL's (a key is a target's URL or
    an origin, maybe followed by a tab and more), or None for a key that
    starts with no http(s) URL."""
    url = key.split("\t", 1)[0]
    if not is_http_url(url):
        return None
    return url_host(url) or None


def key_prefixes(host: str) -> tuple[str, ...]:
    """Where the stored keys about *host* begin (canonical URLs, any port)."""
    name = f"[{host}]" if ":" in host else host  # an IPv6 address is bracketed
    return (f"http://{name}", f"https://{name}")
