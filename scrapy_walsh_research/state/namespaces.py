"""The state-store namespaces more than one component names, each written once.

A namespace is where one kind of state lives in the store (a SQLite
``namespace`` column, a Redis hash ``<prefix>:state:<namespace>``). These are
kept per target URL and read or written by several components: the gate
that owns each, the Redis script that writes a fed line's record with its
cadence (:mod:`.redis.target_queue`), and the purge on opt-out
(:mod:`scrapy_walsh_research.evidence.purge`). Renaming one loses what is
stored under it.
"""

from __future__ import annotations

#: R8: each target's last fetch (gates.cadence)
CADENCE = "cadence"
#: R8 with a fleet: which worker is fetching a target now (gates.cadence)
CADENCE_CLAIMS = "cadence_claims"
#: R7: each target's ETag and Last-Modified (gates.validators)
VALIDATORS = "validators"
#: when each feed entry and markdown link was first seen, per target (the targets spider)
SEEN = "seen"
#: when each target last answered 2xx or 304 (gates.sitemaps): what a
#: sitemap's <lastmod> is compared with
ANSWERED = "target_answered"
#: per origin and sitemap (``<origin>\t<sitemap URL>``): its validators and
#: lastmod table (gates.sitemap_documents)
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
    VALIDATORS, SEEN, CADENCE, ANSWERED, SITEMAP_DOCUMENTS, SITEMAP_TRUST, SITEMAP_HISTORY,
    LLMS_PROBES,
)
