"""Every request meta key the bundle sets or reads, in one place.

Scrapy copies ``meta`` to every redirect hop and retry, and any project code
can set any key, so no key here exempts a request from a gate: what a gate
exempts is the bundle's signed mark (:data:`INTERNAL_META`, checked by
:mod:`scrapy_walsh_research._runtime.marks`), never a key's presence. The
others carry what a component found for a later one, or only delay a
request (:data:`REQUEUED_META`, :data:`PARKED_META`). ``docs/reference.rst``
documents each.
"""

from __future__ import annotations

# -- what a request is --------------------------------------------------------------

#: the bundle's mark, ``purpose.nonce.mac``: its own requests (robots.txt, the
#: blocklist, ...) and declared targets; a mark that does not verify counts for nothing
INTERNAL_META = "walsh_internal"
#: the list line a declared target stems from: ``{line, url, canonical_url}``
#: (set by the targets spider)
TARGET_META = "walsh_target"
#: the feed ticket of a line fed through Redis (the targets spider; see
#: :meth:`~scrapy_walsh_research.state.redis.target_queue.RedisFeed.ticket`)
FEED_META = "walsh_feed_ticket"
#: the /llms.txt probe's pending record: the target's, completed by the probe
LLMS_RECORD_META = "walsh_llms_record"

# -- the bundle's own fetches (marks.internal_fetch) --------------------------------

#: how long the bundle's own request may wait in place for its host's slot (seconds)
MAX_WAIT_META = "walsh_max_wait"
#: the body is read no further than this many bytes (and how many came so far)
MAX_BYTES_META = "walsh_max_bytes"
BYTES_SEEN_META = "_walsh_bytes_seen"

# -- pacing and the frontier --------------------------------------------------------

#: given back by the pacing gate: it keeps its place at the head of its host's queue
REQUEUED_META = "walsh_requeued"
#: given back to wait for a document's next try (a ``time.monotonic()``): the
#: frontier keeps it aside until then, so the host's other requests (another
#: origin's) are not held behind it
PARKED_META = "walsh_parked_until"
#: when the request's bytes last left, stamped by the wire-timed download
#: handler; spacing counts from it
WIRE_TIME_META = "walsh_wire_time"

# -- what a gate found, for the record ------------------------------------------------

#: the usage preferences that applied to the URL, as record dicts (the PREF gate)
PREFERENCES_META = "walsh_preferences"
#: why the R5 gate gave up on the request (the record's reason)
GAVE_UP_META = "walsh_gave_up"
#: the Content-Length announced, and the body bytes received so far: they tell
#: a ``DOWNLOAD_MAXSIZE`` cancellation from other failures (spiders.size_cap)
ANNOUNCED_META = "walsh_announced_length"
RECEIVED_META = "walsh_received_bytes"
