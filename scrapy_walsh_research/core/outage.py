"""What a transient failure leaves a policy document: unknown, for now.

A 5xx or 429, a timeout, a refused or reset connection or a failed DNS
lookup says nothing about what a site allows; it says the document could
not be read *this time*. An :class:`Outage` is that state of one document
(robots.txt, tdmrep.json, the operator's blocklist): since when, how many
tries, the latest answer, and when it is tried next. The gates make the
targets that need it wait (:mod:`scrapy_walsh_research.documents.waits`); only the
bound on that wait turns it into a record, and the record says what
happened, never what the site did not say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapy_walsh_research.core.timestamps import duration_text, utc_iso

#: each retry delay is lengthened by up to this share of it, at random, so
#: that workers and runs that failed together do not all come back together
JITTER = 0.25


def retry_delay(base: float, failures: int, cap: float, rand: float) -> float:
    """The wait before the next try after *failures* in a row: *base*
    doubled per failure after the first, at most *cap*, plus up to
    :data:`JITTER` of it (*rand* in [0, 1)). Jitter only lengthens it: the
    backoff is a floor."""
    return min(base * 2.0 ** max(0, failures - 1), cap) * (1.0 + JITTER * rand)


@dataclass(frozen=True)
class Outage:
    """One document that could not be read, and its tries so far."""

    #: ``robots``, ``preferences`` (tdmrep.json) or ``blocklist``: the stats
    #: under ``walsh/wait/<kind>/``
    kind: str
    #: ``robots.txt``: its name in messages
    document: str
    url: str
    #: the latest failure, after the document's name: ``answered 503``,
    #: ``could not be fetched (TimeoutError: ...)``
    why: str
    #: failed tries in a row
    tries: int
    #: the first and the latest of them (state-store time)
    since: float
    last: float
    #: when the document is tried next (state-store time)
    retry_at: float
    #: whether the tries failed in different ways (only the latest is named)
    mixed: bool = False
    #: the latest try's HTTP status (None: no answer)
    status: int | None = None
    #: whether the failure passes by itself (5xx, 429, a timeout, a
    #: connection or DNS failure), so that waiting for the next try is worth
    #: it; False for what the site's own setup causes (a redirect loop, a
    #: redirect into a blocked host), decided at once
    passing: bool = True
    #: whether the resolver answered that the host name does not exist: an
    #: answer, not an outage, so its targets are decided at once (no request,
    #: tried again next run)
    no_such_name: bool = False

    def describe(self) -> str:
        """``robots.txt answered 503 on 4 tries over 6 min``."""
        if self.tries == 0:
            return f"{self.document} {self.why}"
        tries = "1 try" if self.tries == 1 else f"{self.tries} tries"
        span = f" over {duration_text(self.last - self.since)}" if self.tries > 1 else ""
        if self.mixed:
            return f"{self.document} could not be read on {tries}{span} (last: {self.why})"
        return f"{self.document} {self.why} on {tries}{span}"

    def as_record(self) -> dict[str, Any]:
        """What a target's record keeps of it (``unknown``)."""
        return {
            "document": self.url,
            "tries": self.tries,
            "first_try": utc_iso(self.since),
            "last_try": utc_iso(self.last),
            "last_answer": self.why,
        }
