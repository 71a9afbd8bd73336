"""Every ``WALSH_`` setting's default, in one place.

In the spirit of Scrapy's ``default_settings.py`` and scrapy-redis's
``defaults.py``: one plain constant per setting, named after it. Components
read a setting with its default from here
(``settings.getfloat("WALSH_MIN_DELAY", defaults.WALSH_MIN_DELAY)``); the
add-on does not copy these into the settings, so a project sees only what it
set. ``docs/reference.rst`` documents each with this value
(``tests/test_startup_defaults.py`` checks both).

``None`` means unset: the feature is off, or the value is worked out at run
time (said where so).
"""

from __future__ import annotations

from scrapy_walsh_research.core.contract import (
    BLOCKLIST_SCHEMA_URL,
    BLOCKLIST_URL,
    SIGNATURE_AGENT,
    SIGNATURE_AGENT_FORM,
    SIGNATURE_TTL,
)

# -- what the bot declares ----------------------------------------------------

#: the spec's bot mines metadata and never trains, indexes or feeds AI answers
WALSH_PURPOSES: tuple[str, ...] = ("tdm",)

# -- R3: the operator blocklist ------------------------------------------------

WALSH_BLOCKLIST_URL = BLOCKLIST_URL
WALSH_BLOCKLIST_SCHEMA_URL = BLOCKLIST_SCHEMA_URL
#: the contract requires https; http only for a local sandbox
WALSH_BLOCKLIST_ALLOW_HTTP = False
WALSH_BLOCKLIST_EXTRA: tuple[str, ...] = ()
WALSH_BLOCKLIST_RETRY_DELAY = 300.0
#: the document's ``refresh`` is clamped to [MIN, MAX]: below a minute every
#: request would refetch; above a day an opt-out could wait too long
WALSH_BLOCKLIST_MIN_REFRESH = 60.0
WALSH_BLOCKLIST_MAX_REFRESH = 86400.0
#: a 10^6-entry list is about 80 MB
WALSH_BLOCKLIST_MAX_BYTES = 128 * 1024 * 1024

# -- state, identity, evidence --------------------------------------------------

#: unset: ``.scrapy/walsh`` in the project data dir (``state.directory.state_dir``)
WALSH_STATE_DIR: str | None = None
#: unset: requests are not signed
WALSH_SIGNING_KEY: str | None = None
#: the bot's published signed identity (core.contract): its key directory,
#: named as ``sig1="<URL>"``, each signature living 60 s
WALSH_SIGNATURE_AGENT = SIGNATURE_AGENT
WALSH_SIGNATURE_AGENT_FORM = SIGNATURE_AGENT_FORM
WALSH_SIGNATURE_TTL = SIGNATURE_TTL
WALSH_SIGNATURE_COMPONENTS: tuple[str, ...] = ()
#: unset: ``scrapy walsh-attest --sign`` refuses (a key of its own, never the signing key)
WALSH_ATTESTATION_KEY: str | None = None
#: 90 days
WALSH_AUDIT_RETENTION = 90 * 86400
#: unset: the audit log is ``audit.sqlite3`` in ``WALSH_STATE_DIR`` (one
#: machine), or, with ``WALSH_REDIS_URL``, Redis for WALSH_AUDIT_REDIS_WINDOW;
#: a ``postgresql://`` URL keeps a fleet's evidence for WALSH_AUDIT_RETENTION
WALSH_AUDIT_URL: str | None = None
#: how long a fleet without WALSH_AUDIT_URL keeps its audit log in Redis:
#: 7 days (a week of a busy fleet's entries, not 90 days, fits in memory)
WALSH_AUDIT_REDIS_WINDOW = 7 * 86400.0
WALSH_GC_FREEZE = True

# -- Redis (a fleet) -------------------------------------------------------------

#: unset: the embedded SQLite store, no server
WALSH_REDIS_URL: str | None = None
WALSH_REDIS_PREFIX = "walsh"
WALSH_REDIS_TARGETS_KEY = "targets"
#: workers on different machines reach a host over paths of different length
WALSH_REDIS_MARGIN = 0.05
#: renewed every third of it while its request is in flight, so a dead worker
#: costs its host this long at most
WALSH_REDIS_LEASE = 15.0
WALSH_REDIS_MAX_BACKOFF = 10.0
#: the records of lines fed through Redis (``walsh-records``), the index a
#: purge reads them by, and each machine's copies of them, are kept this long
#: after they were written (a week)
WALSH_RECORDS_TTL = 7 * 86400.0

# -- R2 and the usage preferences ----------------------------------------------

#: an origin's policy documents (robots.txt, tdmrep.json) are cached this
#: long: RFC 9309 §2.4 allows caching robots.txt up to 24 h (0.3.0:
#: WALSH_ROBOTS_TTL)
WALSH_POLICY_TTL = 86400.0
#: a policy document (robots.txt, tdmrep.json, a blocklist not yet in force)
#: that could not be read is tried again after this, doubled per failure
#: (plus up to 25 % jitter), up to the TTL (0.2.0: WALSH_ROBOTS_RETRY_DELAY)
WALSH_POLICY_RETRY_DELAY = 60.0
#: how long a target waits for a policy document (robots.txt, tdmrep.json, a
#: blocklist not yet in force) that a transient failure left unknown, counted
#: from the first failure this run met: a host that heals within it is caught
#: (tries at about 0, 1, 3 and 5 min), one that never answers costs the run
#: about 5 min once nothing else is left to do
WALSH_POLICY_WAIT = 300.0
#: how long targets wait for a host's Visit-time window (robots.txt) to open:
#: a window opening within it is waited for (the targets kept aside, other
#: hosts going on); one further away gives each target its record at once
#: (``skipped``, tried again next run)
WALSH_VISIT_TIME_WAIT = 300.0

# -- R4 pacing and R5 backoff -----------------------------------------------------

#: R4's floor, at most one request per second per host (lower is refused)
WALSH_MIN_DELAY = 1.0
#: spacing counts from when a request's bytes left, and a busy origin may stamp
#: one arrival a few ms later than the next (on a loaded 2-core machine, origin
#: gaps of 0.9942 s and 0.996 s with 5 ms); 10 ms costs a host-bound chain 1 %
WALSH_PACING_MARGIN = 0.010
#: the bot occupies a host at most 1/6 of the time, as Heritrix's delayFactor 5
#: does (it waits 5 x the fetch *after* it, we count from its start); a host
#: answering within 1/6 s keeps the 1 s floor
WALSH_ADAPTIVE_FACTOR = 6.0
#: the longest interval load or distress may set; a signal when already there
#: gives the host up
WALSH_ADAPTIVE_MAX_DELAY = 60.0
#: a 20 s outage then gets at most three requests (1 s floor: 3 s, 9 s, 27 s)
WALSH_ADAPTIVE_BACKOFF = 3.0
#: answers in a row without a signal before the interval comes down a step
#: (then every further one, until the next signal, another)
WALSH_ADAPTIVE_RECOVERY = 3
#: how long a host given up stays skipped (seconds)
WALSH_ADAPTIVE_GIVE_UP = 3600.0
#: a host asking for more is skipped, so no honoured interval is longer; 30 s
#: is the largest window Bing honours
WALSH_MAX_CRAWL_DELAY = 30.0
WALSH_RETRY_TIMES = 3
WALSH_RETRY_BASE_DELAY = 1.0
#: a Retry-After beyond it means give up now
WALSH_RETRY_MAX_DELAY = 600.0

# -- R8, R9, records ---------------------------------------------------------------

#: R8: infrequent runs, a target at most once a day
WALSH_RUN_INTERVAL = 86400.0
WALSH_LLMS_PROBE = True
WALSH_ONLY_NEW = False

# -- how long stored state lasts (state.namespaces.retention) -------------------------

#: what is stored per target URL or origin (validators, cadence, first-seen
#: entries, past answers, robots.txt copies, sitemap readings) is forgotten this
#: long after it was last written: 8 days, so a weekly re-run still finds its
#: validators; a namespace that must hold longer (cadence: WALSH_RUN_INTERVAL;
#: robots.txt: its 30-day last good copy) does
WALSH_STATE_TTL = 8 * 86400.0

# -- R7 with sitemaps (gates.sitemaps, docs/sitemaps.rst) ---------------------------

#: read the sitemaps robots.txt declares and skip what they say has not changed;
#: False: every due target is revalidated (a conditional GET), as before 0.4
WALSH_SITEMAPS = True
#: a host's sitemaps are fetched only when at least this many of its due
#: targets have a past answer to compare with (fewer cannot repay the fetch)
WALSH_SITEMAP_MIN_TARGETS = 10
#: a sitemap read by any worker or run this recently is not fetched again
WALSH_SITEMAP_TTL = 3600.0
#: a sitemap a checked target contradicted is not used for this long (7 days)
WALSH_SITEMAP_DISTRUST = 7 * 86400.0
#: a sitemap whose every claim of change was answered by a 304 (a lastmod that
#: is always "now") is not fetched for this long (7 days)
WALSH_SITEMAP_STALE = 7 * 86400.0

# -- bounds on the in-memory caches (options.cache_size) ----------------------------------

#: parsed robots.txt and tdmrep.json answers kept in memory (origins, for
#: each; 0.3.0: WALSH_ROBOTS_CACHE_SIZE)
WALSH_POLICY_CACHE_SIZE = 1000
#: host clocks kept in memory (hosts whose interval has passed may be evicted)
WALSH_HOST_CLOCK_CACHE_SIZE = 1000
#: last-fetch times (R8 cadence) kept in memory (targets)
WALSH_CADENCE_CACHE_SIZE = 10000
#: targets of a ``-a list=`` file read ahead into the scheduler
WALSH_LIST_LOOKAHEAD = 10000
