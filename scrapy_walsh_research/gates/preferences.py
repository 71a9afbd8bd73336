"""PREF: what a host says about the use of its content, honoured for the
purposes the bot declares (``WALSH_PURPOSES``, default ``tdm``: metadata
mining, never training, search indexing or AI answers).

A downloader middleware right after the robots.txt gate. Before a target is
sent it reads what the host stated ahead of any request:

* the ``Content-Usage`` / ``Content-Signal`` lines of the robots.txt group
  selected for our token (the R2 gate's own policy: one selection);
* ``/.well-known/tdmrep.json`` (TDMRep), fetched once per origin before its
  first target, through every gate (blocklist, robots.txt, pacing, the
  User-Agent and the signature), at most 500 KiB, cached like robots.txt
  (``WALSH_POLICY_TTL``, in the state store, so across runs and workers).

A statement that says no to a declared purpose denies the target: record
``denied``, rule ``PREF``, no request. With the response come the
``tdm-reservation`` / ``tdm-policy``, ``Content-Usage``, ``Content-Signal``
and ``X-Robots-Tag`` headers; one that says no makes the record
``withheld``: status and validators only, nothing read from the body (no
headings, links or hash). Every record carries the statements that applied
to its URL (``preferences``).

tdmrep.json answers, read as TDMRep §3.1 and RFC 9309 §2.3.1 read theirs,
the stricter way where they leave room (``docs/preferences.rst``):

* 2xx: parsed; a body that is no TDMRep document (an HTML "not found" page
  served with 200) means the origin does not implement the protocol; a body
  past 500 KiB is not read: what it reserves is unknown, so the origin's
  targets are not requested (``skipped``, rule PREF) until it is read;
* redirects: followed (TDMRep allows them), each hop through every gate;
* 4xx other than 429: no file, no reservation;
* 429, 5xx, timeouts, connection errors: unknown, so nothing is requested
  from the origin until the file can be fetched; its targets wait for the
  next try (backoff with jitter, ``WALSH_POLICY_RETRY_DELAY``, doubling),
  within ``WALSH_POLICY_WAIT``, then get a record (``skipped``, rule PREF,
  with what happened, never "says no to tdm"); a last good answer younger
  than 30 days is used instead;
* a gate that refuses the fetch (robots.txt disallows the file, a redirect
  into a blocked host or a disallowed path): not read; only the headers can
  then reserve.

Correctness lives here; the frontier only asks (``will_be_denied``) so a
denied target does not wait for its host's slot.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.http import Response

from scrapy_walsh_research._runtime.marks import DIRECT, TDMREP
from scrapy_walsh_research._runtime.meta import PREFERENCES_META
from scrapy_walsh_research.core.contract import PRODUCT_TOKEN
from scrapy_walsh_research.core.outage import Outage
from scrapy_walsh_research.core.preferences.model import (
    FROM_HEADER,
    FROM_TDMREP,
    Preference,
    decide,
    denial_reason,
)
from scrapy_walsh_research.core.preferences.statements import response_preferences
from scrapy_walsh_research.core.preferences.tdmrep import (
    TDM_RESERVATION,
    TdmFile,
    parse_tdmrep,
    tdm_file_preferences,
)
from scrapy_walsh_research.core.records import response_validators
from scrapy_walsh_research.core.robots_policy import MAX_ROBOTS_BYTES
from scrapy_walsh_research.core.urls import origin_of
from scrapy_walsh_research.documents.fetch import validators
from scrapy_walsh_research.errors import WalshDenied, deny
from scrapy_walsh_research.gates.origin_documents import OriginDocuments
from scrapy_walsh_research.settings.check import check_configuration
from scrapy_walsh_research.state import namespaces
from scrapy_walsh_research.state.namespaces import LAST_GOOD_MAX_AGE

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)

TDMREP_PATH = "/.well-known/tdmrep.json"
#: read at most this much of a tdmrep.json (robots.txt's limit; real files
#: are a few hundred bytes)
MAX_TDMREP_BYTES = MAX_ROBOTS_BYTES
#: where tdmrep.json answers are stored (state.namespaces says what each holds)
STATE_NAMESPACE = namespaces.TDMREP
UNREACHABLE_NAMESPACE = namespaces.TDMREP_UNREACHABLE


@dataclass
class TdmEntry:
    """What an origin's tdmrep.json says, and until when it holds."""

    tdm: TdmFile | None
    expires: float
    #: HTTP status of the last fetch, or None (a network failure, not fetched)
    status: int | None
    failures: int = 0
    #: why the file was answered but cannot be read (too large): what it
    #: reserves is unknown, and the origin's targets are not requested
    unknown: str | None = None
    #: the file unknown for now (a transient failure, no last good answer):
    #: its targets wait for the next try
    outage: Outage | None = None

    def preferences(self, url: str) -> list[Preference]:
        """What the file states about *url* (nothing while it is unknown)."""
        if self.tdm is None:
            return []
        return tdm_file_preferences(self.tdm, url)


class PreferencesMiddleware(OriginDocuments[TdmEntry]):
    """Downloader middleware: deny (before) or withhold (after) a target
    whose host says no to a purpose the bot declares."""

    kind = "preferences"
    document = "tdmrep.json"
    answer_namespaces = (STATE_NAMESPACE,)
    body_field = "body"
    unreachable_namespace = UNREACHABLE_NAMESPACE
    log = logger
    rule = "PREF"
    while_unknown = (
        "what it reserves is unknown, so the origin is not requested (the stricter reading)"
    )
    path = TDMREP_PATH
    purpose = TDMREP
    max_bytes = MAX_TDMREP_BYTES

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.purposes = self.context.settings.purposes
        self.context.audit.purposes_declared(self.purposes)
        #: what applied before each request went out, for its response
        self._before: weakref.WeakKeyDictionary[Request, tuple[Preference, ...]] = (
            weakref.WeakKeyDictionary()
        )
        logger.info(
            "Walsh-Research declares its purposes: %(p)s (WALSH_PURPOSES)",
            {"p": ", ".join(self.purposes)},
        )

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        check_configuration(crawler)
        return cls(crawler)

    # -- the gate ---------------------------------------------------------------

    def _own(self, request: Request) -> bool:
        """robots.txt, the operator's documents, tdmrep.json: not content."""
        return self.marks.purpose(request, quiet=True) in DIRECT

    async def process_request(self, request: Request) -> Request | None:
        if self._own(request):
            return None
        entry = await self.entry_or_requeue(request)
        if isinstance(entry, Request):
            return entry  # back to the frontier until its host or the file is ready
        if entry.unknown is not None:
            reason = f"{entry.unknown}: {self.while_unknown}"
            deny(self.crawler, logger, request, "PREF", reason, outcome="skipped")
        stated = await self._robots_preferences(request) + tuple(entry.preferences(request.url))
        self._before[request] = stated
        records = [p.as_record() for p in stated]
        request.meta[PREFERENCES_META] = records
        denying = decide(stated, self.purposes)
        if denying is not None:
            reason = denial_reason(denying, self.purposes)
            deny(self.crawler, logger, request, "PREF", reason, record={"preferences": records})
        return None

    async def _robots_preferences(self, request: Request) -> tuple[Preference, ...]:
        """The selected robots.txt group's statements for the request's URL,
        from the R2 gate's policy (fresh: it has just decided this request)."""
        robots = self.context.robots
        if robots is None:  # no R2 gate (the start-up check refuses that): none read
            return ()
        policy = await robots.policy_for(request.url)
        return policy.preferences(request.url)

    async def process_response(self, request: Request, response: Response) -> Response:
        if self._own(request):
            return response
        before = self._before.pop(request, None)
        if before is None:  # answered by a component before this gate: read them now
            before = await self._robots_preferences(request)
            entry = self._fresh(origin_of(request.url))
            if entry is not None:
                before += tuple(entry.preferences(request.url))
        headers = {
            name.decode("latin-1"): [v.decode("latin-1") for v in values]
            for name, values in response.headers.items()
        }
        after = response_preferences(headers, PRODUCT_TOKEN, time.time())
        if any(p.source == FROM_HEADER and p.signal == TDM_RESERVATION for p in after):
            # TDMRep §5: the header's values supersede the file's
            before = tuple(p for p in before if p.source != FROM_TDMREP)
        applied = (*before, *after)
        records = [p.as_record() for p in applied]
        request.meta[PREFERENCES_META] = records
        if not 200 <= response.status < 300:
            return response  # no content to use (a 304, an error page: recorded as such)
        denying = decide(applied, self.purposes)
        if denying is None:
            return response
        reason = denial_reason(denying, self.purposes) + ": content not read"
        fields = {**response_validators(response), "preferences": records}
        deny(self.crawler, logger, request, "PREF", reason, outcome="withheld", record=fields)

    def would_deny(self, request: Request) -> bool:
        """Whether cached answers alone already deny *request* (for the frontier)."""
        if self._own(request):
            return False
        entry = self._fresh(origin_of(request.url))
        if entry is not None and entry.outage is not None:
            return self._waited_out(entry)  # waiting for it: not decided
        if entry is not None and entry.unknown is not None:
            return True
        robots = self.context.robots
        policy = robots.cached_policy(request.url) if robots is not None else None
        if entry is None or policy is None:
            return False
        stated = (*policy.preferences(request.url), *entry.preferences(request.url))
        return decide(stated, self.purposes) is not None

    # -- tdmrep.json, once per origin ------------------------------------------------

    async def _fetch(
        self, origin: str, previous: TdmEntry | None, max_wait: float | None
    ) -> TdmEntry:
        response = await self._get(origin, previous, max_wait)
        if not isinstance(response, Response):
            return response  # not fetched
        status, now = response.status, self.store.time()
        if 200 <= status < 300:
            body = response.body
            if len(body) > MAX_TDMREP_BYTES:
                self.stats.inc_value("walsh/preferences/too_large")
                why = f"tdmrep.json is larger than {MAX_TDMREP_BYTES // 1024} KiB and was not read"
                logger.warning("%(why)s: %(origin)s", {"why": why, "origin": origin})
                return TdmEntry(None, now + self.ttl, status, unknown=why)
            copy = {"body": body.decode("latin-1"), "fetched_at": now, "status": status,
                    **validators(response)}  # fmt: skip
            await self.store.put(STATE_NAMESPACE, origin, copy)
            return self._entry(body, status, now + self.ttl)
        if 400 <= status < 500 and status != 429:
            await self.store.put(STATE_NAMESPACE, origin, {"fetched_at": now, "status": status})
            return TdmEntry(None, now + self.ttl, status)
        return await self._unreachable(origin, previous, status, f"answered {status}")

    async def _refused(self, origin: str, previous: TdmEntry | None, exc: WalshDenied) -> TdmEntry:
        self.stats.inc_value("walsh/preferences/not_fetched")
        if exc.outcome == "skipped" or not exc.lasting:
            # a host not to be contacted now, or a refusal that passes by
            # itself (robots.txt unreachable, the blocklist lost): unknown
            return await self._unreachable(origin, previous, None, f"was not fetched ({exc})")
        # a gate refused it (robots.txt disallows it, a hop into a blocked
        # host): the file is not read; only the headers can reserve
        logger.info(
            "tdmrep.json of %(origin)s not fetched (%(why)s): only response headers can "
            "reserve TDM rights there",
            {"origin": origin, "why": exc},
        )
        return TdmEntry(None, self.store.time() + self.ttl, None)

    def _read(self, entry: TdmEntry) -> bool:
        return entry.unknown is None

    def _entry(self, body: bytes, status: int | None, expires: float) -> TdmEntry:
        tdm = parse_tdmrep(body)
        if tdm is None:
            self.stats.inc_value("walsh/preferences/not_tdmrep")
        elif tdm.problems:
            logger.info("tdmrep.json read with problems: %(p)s", {"p": tdm.problems})
        return TdmEntry(tdm, expires, status)

    async def _from_saved(self, saved: dict[str, Any], expires: float) -> TdmEntry:
        status = saved.get("status")
        code = status if isinstance(status, int) else None
        if isinstance(saved.get("body"), str):
            return self._entry(str(saved["body"]).encode("latin-1"), code, expires)
        return TdmEntry(None, expires, code)

    async def _failed_entry(self, origin: str, outage: Outage) -> TdmEntry:
        """Unknown: nothing is requested from the origin until the file can
        be fetched, unless a last good copy of the file exists. A stored "no
        file" (4xx) is not one, as for robots.txt: what the origin says while
        it cannot answer is unknown."""
        now = self.store.time()
        saved = await self.store.get(STATE_NAMESPACE, origin)
        if (
            isinstance(saved, dict)
            and isinstance(saved.get("body"), str)
            and now - float(saved.get("fetched_at", 0)) < LAST_GOOD_MAX_AGE
        ):
            self.stats.inc_value("walsh/preferences/last_good_used")
            logger.warning(
                "%(what)s for %(origin)s; using the last good answer; next try in %(d).0f s",
                {"what": outage.describe(), "origin": origin, "d": outage.retry_at - now},
            )
            entry = await self._from_saved(saved, outage.retry_at)
            entry.failures = outage.tries
            return entry
        if not outage.passing and not outage.no_such_name:  # decided now: not read
            return TdmEntry(None, outage.retry_at, outage.status, outage.tries, outage.describe())
        return TdmEntry(None, outage.retry_at, outage.status, outage.tries, outage=outage)
