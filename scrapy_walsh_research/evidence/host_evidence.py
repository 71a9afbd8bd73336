"""What the bot did to a host, read from the audit log alone.

Every request sent to a host and its subdomains with its time, path, status,
User-Agent and keyid; every target not fetched (denied, skipped, failed) and
why; each robots.txt version in
force and when, and what it said to the operator (Comment lines, Visit-time
windows); the blocklist versions and the R3 decisions; purges; and, per
exact host (pacing is per host), the gap between consecutive requests against
the interval that applied then and what set it: the floor (1 s), the
Crawl-delay in force, the host's load (a multiple of its response time) or
its distress (errors, timeouts), or an R5 hold the previous answers started
(Retry-After, backoff); and the waits for its robots.txt or tdmrep.json
while a failure left them unknown (each try, the next one, and how the wait
ended); and what it made of the host's sitemaps (the claims it checked,
those contradicted, the targets it did not request because a checked sitemap
said they had not changed). :mod:`scrapy_walsh_research.evidence.pages` shows it
to a site owner; ``scrapy walsh-report --json`` prints it.
"""

from __future__ import annotations

import datetime
import heapq
import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, Iterable

#: a measured gap may fall short of the interval by this much and still be
#: kept: the log's times are wall clock, pacing's monotonic
TOLERANCE_S = 0.001
#: outcomes of a target that was fetched; every other one was not
FETCHED = ("fetched", "not_modified")
#: outcomes where a rule or the site said no: an opt-out (robots.txt, the
#: blocklist), a usage preference, the bot's scope. The rest not fetched were
#: skipped (R4/R5/R8, a duplicate line) or failed (an HTTP error such as 404,
#: a network failure), which no one denied
DENIED = ("denied", "withheld")
#: outcomes of the operator's own list lines (a line that repeats an earlier
#: one, a line that is no URL): nothing the site did, counted apart
LIST_LINES = ("duplicate", "invalid")
#: distinct User-Agents and keyids tallied (the bot sends one of each; more is
#: a finding, and a hostile log cannot make the tally grow without bound)
TALLIED = 100


@dataclass
class Sent:
    """One request that reached the network, with its answer."""

    t: float
    ts: str
    host: str
    url: str
    kind: str
    method: str
    user_agent: str | None
    keyid: str | None
    robots_sha256: str | None
    blocklist: dict[str, Any] | None
    interval: float | None
    #: what set the interval: floor, Crawl-delay, load, distress, Retry-After, backoff
    set_by: str | None = None
    status: int | None = None
    error: str | None = None
    hold_until: float | None = None
    hold_by: str | None = None
    #: seconds since the previous request to the same exact host
    gap: float | None = None
    #: the smallest gap that was allowed before this request
    required: float | None = None

    @property
    def path(self) -> str:
        parts = urlsplit(self.url)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    @property
    def under(self) -> bool:
        return (
            self.gap is not None
            and self.required is not None
            and (self.gap < self.required - TOLERANCE_S)
        )

    def as_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data.update(path=self.path, under_interval=self.under)
        return data


#: request rows a report keeps (the latest), and rows of each other table:
#: one host's report holds at most this much however long its log
ROWS = 10_000
#: entries held back to put a few out of order back in time order (workers'
#: clocks differ a little; a store returns each host's entries in order)
REORDER = 1_000
#: requests waiting for their answer (an answer follows its request within
#: seconds; a request never answered is forgotten after this many more)
OPEN = 1_000
#: request ids remembered to drop an entry written twice (a write retried
#: after its acknowledgement was lost: the copies are close together)
IDS = 10_000


@dataclass
class HostEvidence:
    """Everything the audit log holds about one host (and, for an apex
    asked with ``--host``, its subdomains), read in one pass: counts over
    every entry, and the latest :data:`ROWS` rows of each table."""

    host: str
    #: the latest requests (every request counts in :attr:`request_count`)
    requests: list[Sent] = field(default_factory=list)
    request_count: int = 0
    #: decisions about targets not fetched: the latest ones
    not_fetched: list[dict[str, Any]] = field(default_factory=list)
    decision_count: int = 0
    purges: list[dict[str, Any]] = field(default_factory=list)
    #: a document of the host unknown for a while: ``waiting`` (a failed
    #: try, and the next), ``known`` (read again), ``gave_up`` (the bound)
    waits: list[dict[str, Any]] = field(default_factory=list)
    #: what the bot made of the host's sitemaps: ``trusted``,
    #: ``contradicted``, ``stale``, ``ignored`` (the sitemaps gate)
    sitemaps: list[dict[str, Any]] = field(default_factory=list)
    #: gaps measured; the requests under the interval (each a breach the
    #: operator must see): every one counted, the latest ROWS listed
    gap_count: int = 0
    under: list[Sent] = field(default_factory=list)
    under_count: int = 0
    smallest_gap: Sent | None = None
    #: targets not fetched by "outcome (rule)", and how many were denied
    outcomes: dict[str, int] = field(default_factory=dict)
    denied_count: int = 0
    #: the operator's own list lines not fetched (:data:`LIST_LINES`): by
    #: outcome, and the latest rows
    list_line_counts: dict[str, int] = field(default_factory=dict)
    list_lines: list[dict[str, Any]] = field(default_factory=list)
    #: every request's User-Agent and keyid ("" unsigned), with how many sent each
    user_agents: dict[str, int] = field(default_factory=dict)
    keyids: dict[str, int] = field(default_factory=dict)
    robots: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    robots_fetch_rows: list[Sent] = field(default_factory=list)
    #: what each robots.txt version said to the operator (Comment lines, the
    #: Visit-time windows, the values that could not be read), latest first seen
    robots_said: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    blocklists: dict[str, dict[str, Any]] = field(default_factory=dict)
    preferences: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    declared: list[str] | None = None
    entries_named: dict[str, None] = field(default_factory=dict)
    sitemap_counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("fetched", "claims_checked", "contradicted", "requests_saved"), 0
        )
    )
    sitemap_skip_rows: list[dict[str, Any]] = field(default_factory=list)

    def sitemap_facts(self) -> dict[str, int]:
        """Sitemap requests sent, claims checked against a target's own
        answer, claims contradicted, and targets not requested because a
        checked sitemap said they had not changed."""
        return dict(self.sitemap_counts)

    def sitemap_skips(self) -> list[dict[str, Any]]:
        """Targets not requested: a checked sitemap said they had not changed (the latest)."""
        return self.sitemap_skip_rows

    @property
    def denied(self) -> list[dict[str, Any]]:
        """The targets a rule or the site said no to (:data:`DENIED`), of the rows kept."""
        return [d for d in self.not_fetched if d.get("outcome") in DENIED]

    def not_fetched_by_outcome(self) -> dict[str, int]:
        """How many targets were not fetched, by outcome and rule
        (``denied (R2)``, ``skipped (R8)``, ``failed``)."""
        return dict(sorted(self.outcomes.items()))

    @property
    def gaps(self) -> list[Sent]:
        """The requests kept that have a gap (every gap counts in :attr:`gap_count`)."""
        return [r for r in self.requests if r.gap is not None]

    @property
    def not_fetched_count(self) -> int:
        return sum(self.outcomes.values())

    def robots_versions(self) -> list[dict[str, Any]]:
        """Each robots.txt (origin, sha256) in force, first and last seen."""
        return list(self.robots.values())

    def robots_fetches(self) -> list[Sent]:
        return self.robots_fetch_rows

    def blocklist_versions(self) -> list[dict[str, Any]]:
        return list(self.blocklists.values())

    def stated_preferences(self) -> list[dict[str, Any]]:
        """Each usage preference the host stated (source, signal, value,
        scope), when it was first and last in force, and what the bot did
        with the targets it applied to (outcomes, by rule)."""
        return list(self.preferences.values())

    def purposes(self) -> list[str] | None:
        """The purposes the bot declared at its latest decision here."""
        return self.declared

    def blocklist_entries(self) -> list[str]:
        """The operator's entries that R3 decisions name."""
        return list(self.entries_named)

    @property
    def list_line_count(self) -> int:
        return sum(self.list_line_counts.values())

    @property
    def empty(self) -> bool:
        return not (
            self.request_count or self.decision_count or self.purges or self.waits
            or self.sitemaps
        )  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        smallest = self.smallest_gap
        return {
            "host": self.host,
            "requests": [r.as_json() for r in self.requests],
            "request_count": self.request_count,
            "not_fetched": self.not_fetched,
            "not_fetched_by_outcome": self.not_fetched_by_outcome(),
            "list_lines": self.list_lines,
            "list_lines_by_outcome": dict(sorted(self.list_line_counts.items())),
            "user_agents": self.user_agents,
            "keyids": self.keyids,
            "decisions": self.decision_count,
            "robots_versions": self.robots_versions(),
            "robots_said": list(self.robots_said.values()),
            "blocklist_versions": self.blocklist_versions(),
            "blocklist_entries": self.blocklist_entries(),
            "purposes": self.purposes(),
            "stated_preferences": self.stated_preferences(),
            "purges": self.purges,
            "waits": self.waits,
            "sitemaps": self.sitemaps,
            "sitemap_facts": self.sitemap_facts(),
            "smallest_gap": None if smallest is None else smallest.gap,
            "under_interval": self.under_count,
            "under": [r.as_json() for r in self.under],
            "rows_kept": ROWS,
        }


class Collector:
    """Builds one host's :class:`HostEvidence` from its entries in one pass,
    in bounded memory: entries may come a little out of time order (each
    worker's clock), and are put back in order through a small heap; a
    request's answer is matched by its id; only the latest rows of each
    table are kept, every count covers all."""

    def __init__(self, host: str, since: float | None = None) -> None:
        self.evidence = HostEvidence(host)
        self.since = since
        self._heap: list[tuple[float, int, dict[str, Any]]] = []
        self._n = 0
        self._requests: deque[Sent] = deque(maxlen=ROWS)
        self._not_fetched: deque[dict[str, Any]] = deque(maxlen=ROWS)
        self._lists = {
            name: deque[dict[str, Any]](maxlen=ROWS)
            for name in ("purges", "waits", "sitemaps", "skips", "list_lines")
        }
        self._robots_fetches: deque[Sent] = deque(maxlen=ROWS)
        self._under: deque[Sent] = deque(maxlen=ROWS)
        #: requests waiting for their answer, and the ids already taken
        self._open: OrderedDict[str, Sent] = OrderedDict()
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._eids: OrderedDict[str, None] = OrderedDict()
        self._previous: dict[str, Sent] = {}
        self._holds: dict[str, tuple[float, str]] = {}

    def add(self, entry: dict[str, Any]) -> None:
        self._n += 1
        heapq.heappush(self._heap, (float(entry.get("t", 0.0)), self._n, entry))
        if len(self._heap) > REORDER:
            self._take(heapq.heappop(self._heap)[2])

    def result(self) -> HostEvidence:
        while self._heap:
            self._take(heapq.heappop(self._heap)[2])
        ev = self.evidence
        ev.requests = list(self._requests)
        ev.not_fetched = list(self._not_fetched)
        ev.purges = list(self._lists["purges"])
        ev.waits = list(self._lists["waits"])
        ev.sitemaps = list(self._lists["sitemaps"])
        ev.sitemap_skip_rows = list(self._lists["skips"])
        ev.list_lines = list(self._lists["list_lines"])
        ev.robots_fetch_rows = list(self._robots_fetches)
        ev.under = list(self._under)
        return ev

    def _take(self, e: dict[str, Any]) -> None:
        eid = e.get("eid")
        if eid:
            if eid in self._eids:
                return  # the same entry written twice (a write retried)
            self._eids[eid] = None
            if len(self._eids) > IDS:
                self._eids.popitem(last=False)
        event = e.get("event")
        if event == "request":
            self._request(e)
        elif event == "response":
            self._answer(e)
        elif not self._kept(e):
            return
        elif event == "decision":
            self._decision(e)
        elif event == "purge":
            self._lists["purges"].append(e)
        elif event == "wait":
            self._lists["waits"].append(e)
        elif event == "sitemap":
            self._sitemap(e)
        elif event == "robots_said":
            key = (str(e.get("url")), str(e.get("sha256")))
            said = self.evidence.robots_said
            said.pop(key, None)
            said[key] = {k: e.get(k) for k in ("ts", "url", "sha256", "comments", "visit_time",
                                               "visit_time_unread")}  # fmt: skip
            while len(said) > ROWS:
                said.pop(next(iter(said)))

    def _kept(self, e: dict[str, Any]) -> bool:
        return self.since is None or e.get("t", 0.0) >= self.since

    def _request(self, e: dict[str, Any]) -> None:
        rid = e.get("id") or ""
        if rid in self._ids:
            return  # the same entry written twice
        r = _sent(e)
        if rid:
            self._ids[rid] = None
            if len(self._ids) > IDS:
                self._ids.popitem(last=False)
            self._open[rid] = r
            if len(self._open) > OPEN:
                self._open.popitem(last=False)
        self._gap(r)
        if not self._kept(e):
            return
        ev = self.evidence
        ev.request_count += 1
        self._requests.append(r)
        _tally(ev.user_agents, r.user_agent or "")
        _tally(ev.keyids, r.keyid or "")
        if r.gap is not None:
            ev.gap_count += 1
            if ev.smallest_gap is None or r.gap < (ev.smallest_gap.gap or 0.0):
                ev.smallest_gap = r
            if r.under:
                ev.under_count += 1
                self._under.append(r)
        if r.kind.startswith("sitemap"):
            ev.sitemap_counts["fetched"] += 1
        if r.kind.startswith("robots"):
            self._robots_fetches.append(r)
        self._versions(r)

    def _gap(self, r: Sent) -> None:
        """The gap since the previous request to the same exact host and the
        interval that applied (the interval R4 required as the request was
        sent, or longer while an R5 hold from an earlier answer ran)."""
        before = self._previous.get(r.host)
        if before is not None:
            r.gap = r.t - before.t
            required = r.interval if r.interval is not None else 1.0
            r.set_by = r.set_by or "floor"
            hold = self._holds.get(r.host)
            if hold is not None and hold[0] - before.t > required:
                required = hold[0] - before.t
                if r.set_by not in ("Retry-After", "backoff"):
                    r.set_by = hold[1]
            r.required = required
        self._previous[r.host] = r

    def _answer(self, e: dict[str, Any]) -> None:
        r = self._open.pop(e.get("id") or "", None)
        if r is None:
            return
        r.status, r.error = e.get("status"), e.get("error")
        r.hold_until, r.hold_by = e.get("hold_until"), e.get("hold_by")
        if r.hold_until is not None and r.hold_until > self._holds.get(r.host, (0.0, ""))[0]:
            self._holds[r.host] = (r.hold_until, r.hold_by or "backoff")

    def _versions(self, r: Sent) -> None:
        ev = self.evidence
        if r.robots_sha256:
            parts = urlsplit(r.url)
            key = (f"{parts.scheme}://{parts.netloc}", r.robots_sha256)
            v = ev.robots.setdefault(
                key, {"origin": key[0], "sha256": key[1], "first": r.ts, "last": r.ts, "n": 0}
            )
            v["last"], v["n"] = r.ts, v["n"] + 1
        b = r.blocklist
        if b and b.get("sha256"):
            w = ev.blocklists.setdefault(
                b["sha256"],
                {"updated": b.get("updated"), "sha256": b["sha256"], "first": r.ts, "n": 0},
            )
            w["last"], w["n"] = r.ts, w["n"] + 1

    def _decision(self, d: dict[str, Any]) -> None:
        ev = self.evidence
        ev.decision_count += 1
        outcome = d.get("outcome")
        rule = d.get("rule")
        if outcome in LIST_LINES:
            key = str(outcome)
            ev.list_line_counts[key] = ev.list_line_counts.get(key, 0) + 1
            self._lists["list_lines"].append(d)
        elif outcome not in FETCHED:
            key = str(outcome) + (f" ({rule})" if rule else "")
            ev.outcomes[key] = ev.outcomes.get(key, 0) + 1
            ev.denied_count += outcome in DENIED
            self._not_fetched.append(d)
        elif outcome == "not_modified" and rule == "R7":
            ev.sitemap_counts["requests_saved"] += 1
            self._lists["skips"].append(d)
        if d.get("purposes") is not None:
            ev.declared = list(d["purposes"])
        if rule == "R3":
            for name in re.findall(r"blocklist entry '([^']+)'", str(d.get("reason"))):
                ev.entries_named[name] = None
        for p in d.get("preferences") or []:
            if isinstance(p, dict):
                self._preference(p, d)

    def _preference(self, p: dict[str, Any], d: dict[str, Any]) -> None:
        key = tuple(str(p.get(k)) for k in ("source", "signal", "value", "scope"))
        v = self.evidence.preferences.setdefault(key, {
            "source": key[0], "signal": key[1], "value": key[2], "scope": key[3],
            "purposes": p.get("purposes") or [], "allows": p.get("allows"),
            "first": d.get("ts"), "last": d.get("ts"), "did": {},
        })  # fmt: skip
        v["last"] = d.get("ts")
        did = str(d.get("outcome")) + (f" ({d['rule']})" if d.get("rule") else "")
        v["did"][did] = v["did"].get(did, 0) + 1

    def _sitemap(self, e: dict[str, Any]) -> None:
        state = str(e.get("state"))
        counts = self.evidence.sitemap_counts
        counts["claims_checked"] += state in ("trusted", "contradicted")
        counts["contradicted"] += state == "contradicted"
        self._lists["sitemaps"].append(e)


def collect(
    entries: Iterable[dict[str, Any]], host: str, since: float | None = None
) -> HostEvidence:
    """The evidence about *host* in *entries* (its audit log, in about time
    order); with *since*, only what happened from then on is listed, but
    gaps are measured from the requests before it (the first gap after the
    cut is evidence too)."""
    collector = Collector(host, since)
    for e in entries:
        collector.add(e)
    return collector.result()


async def collect_stream(
    entries: AsyncIterable[dict[str, Any]], host: str, since: float | None = None
) -> HostEvidence:
    """:func:`collect` over a store's streamed read."""
    collector = Collector(host, since)
    async for e in entries:
        collector.add(e)
    return collector.result()


def _tally(counts: dict[str, int], value: str) -> None:
    if value in counts or len(counts) < TALLIED:
        counts[value] = counts.get(value, 0) + 1
    else:
        counts["(others)"] = counts.get("(others)", 0) + 1


def _sent(e: dict[str, Any]) -> Sent:
    return Sent(
        t=e["t"],
        ts=e.get("ts") or "",
        host=e.get("host") or "",
        url=e.get("url") or "",
        kind=e.get("kind") or "",
        method=e.get("method") or "GET",
        user_agent=e.get("user_agent"),
        keyid=e.get("keyid"),
        robots_sha256=e.get("robots_sha256"),
        blocklist=e.get("blocklist"),
        interval=e.get("interval"),
        set_by=e.get("interval_set_by"),
    )


def by_host(entries: list[dict[str, Any]], since: float | None = None) -> dict[str, HostEvidence]:
    """The evidence for each exact host in *entries* (a small log, in memory)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("host"):
            grouped.setdefault(e["host"], []).append(e)
    out = {h: collect(grouped[h], h, since) for h in sorted(grouped)}
    return {h: ev for h, ev in out.items() if not ev.empty}


def parse_since(text: str) -> float:
    """``--since``: an ISO date or date-time, UTC unless it says otherwise."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(
            f"--since {text!r} is not an ISO date or date-time (e.g. 2026-11-01 or "
            f"2026-11-01T12:00:00Z)"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()
