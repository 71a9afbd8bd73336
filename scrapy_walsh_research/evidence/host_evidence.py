"""What the bot did to a host, read from the audit log alone.

Every request sent to a host and its subdomains with its time, path, status,
User-Agent and keyid; every target not fetched (denied, skipped, failed) and
why; each robots.txt version in
force and when; the blocklist versions and the R3 decisions; purges; and, per
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
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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


@dataclass
class HostEvidence:
    """Everything the audit log holds about one host (and, for an apex
    asked with ``--host``, its subdomains)."""

    host: str
    requests: list[Sent] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    purges: list[dict[str, Any]] = field(default_factory=list)
    #: a document of the host unknown for a while: ``waiting`` (a failed
    #: try, and the next), ``known`` (read again), ``gave_up`` (the bound)
    waits: list[dict[str, Any]] = field(default_factory=list)
    #: what the bot made of the host's sitemaps: ``trusted``,
    #: ``contradicted``, ``stale``, ``ignored`` (the sitemaps gate)
    sitemaps: list[dict[str, Any]] = field(default_factory=list)

    def sitemap_facts(self) -> dict[str, int]:
        """Sitemap requests sent, claims checked against a target's own
        answer, claims contradicted, and targets not requested because a
        checked sitemap said they had not changed."""
        states = [str(e.get("state")) for e in self.sitemaps]
        return {
            "fetched": sum(r.kind.startswith("sitemap") for r in self.requests),
            "claims_checked": sum(s in ("trusted", "contradicted") for s in states),
            "contradicted": states.count("contradicted"),
            "requests_saved": len(self.sitemap_skips()),
        }

    def sitemap_skips(self) -> list[dict[str, Any]]:
        """Targets not requested: a checked sitemap said they had not changed."""
        return [d for d in self.decisions
                if d.get("outcome") == "not_modified" and d.get("rule") == "R7"]  # fmt: skip

    @property
    def not_fetched(self) -> list[dict[str, Any]]:
        """Every target decision but a fetch: denied, skipped or failed."""
        return [d for d in self.decisions if d.get("outcome") not in FETCHED]

    @property
    def denied(self) -> list[dict[str, Any]]:
        """The targets a rule or the site said no to (:data:`DENIED`)."""
        return [d for d in self.decisions if d.get("outcome") in DENIED]

    def not_fetched_by_outcome(self) -> dict[str, int]:
        """How many targets were not fetched, by outcome and rule
        (``denied (R2)``, ``skipped (R8)``, ``failed``)."""
        counts: dict[str, int] = {}
        for d in self.not_fetched:
            key = str(d.get("outcome")) + (f" ({d['rule']})" if d.get("rule") else "")
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def gaps(self) -> list[Sent]:
        return [r for r in self.requests if r.gap is not None]

    @property
    def smallest_gap(self) -> Sent | None:
        return min(self.gaps, key=lambda r: r.gap or 0.0, default=None)

    @property
    def under(self) -> list[Sent]:
        return [r for r in self.requests if r.under]

    def robots_versions(self) -> list[dict[str, Any]]:
        """Each robots.txt (origin, sha256) in force, first and last seen."""
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for r in self.requests:
            if not r.robots_sha256:
                continue
            parts = urlsplit(r.url)
            key = (f"{parts.scheme}://{parts.netloc}", r.robots_sha256)
            v = seen.setdefault(
                key, {"origin": key[0], "sha256": key[1], "first": r.ts, "last": r.ts, "n": 0}
            )
            v["last"], v["n"] = r.ts, v["n"] + 1
        return list(seen.values())

    def robots_fetches(self) -> list[Sent]:
        return [r for r in self.requests if r.kind.startswith("robots")]

    def blocklist_versions(self) -> list[dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        for r in self.requests:
            b = r.blocklist
            if not b or not b.get("sha256"):
                continue
            v = seen.setdefault(
                b["sha256"],
                {"updated": b.get("updated"), "sha256": b["sha256"], "first": r.ts, "n": 0},
            )
            v["last"], v["n"] = r.ts, v["n"] + 1
        return list(seen.values())

    def stated_preferences(self) -> list[dict[str, Any]]:
        """Each usage preference the host stated (source, signal, value,
        scope), when it was first and last in force, and what the bot did
        with the targets it applied to (outcomes, by rule)."""
        seen: dict[tuple[str, ...], dict[str, Any]] = {}
        for d in self.decisions:
            for p in d.get("preferences") or []:
                if not isinstance(p, dict):
                    continue
                key = tuple(str(p.get(k)) for k in ("source", "signal", "value", "scope"))
                v = seen.setdefault(key, {
                    "source": key[0], "signal": key[1], "value": key[2], "scope": key[3],
                    "purposes": p.get("purposes") or [], "allows": p.get("allows"),
                    "first": d.get("ts"), "last": d.get("ts"), "did": {},
                })  # fmt: skip
                v["last"] = d.get("ts")
                did = str(d.get("outcome")) + (f" ({d['rule']})" if d.get("rule") else "")
                v["did"][did] = v["did"].get(did, 0) + 1
        return list(seen.values())

    def purposes(self) -> list[str] | None:
        """The purposes the bot declared at its latest decision here."""
        for d in reversed(self.decisions):
            if d.get("purposes") is not None:
                return list(d["purposes"])
        return None

    def blocklist_entries(self) -> list[str]:
        """The operator's entries that R3 decisions name."""
        found: dict[str, None] = {}
        for d in self.decisions:
            if d.get("rule") == "R3":
                for entry in re.findall(r"blocklist entry '([^']+)'", str(d.get("reason"))):
                    found[entry] = None
        return list(found)

    def as_json(self) -> dict[str, Any]:
        smallest = self.smallest_gap
        return {
            "host": self.host,
            "requests": [r.as_json() for r in self.requests],
            "not_fetched": self.not_fetched,
            "not_fetched_by_outcome": self.not_fetched_by_outcome(),
            "decisions": len(self.decisions),
            "robots_versions": self.robots_versions(),
            "blocklist_versions": self.blocklist_versions(),
            "blocklist_entries": self.blocklist_entries(),
            "purposes": self.purposes(),
            "stated_preferences": self.stated_preferences(),
            "purges": self.purges,
            "waits": self.waits,
            "sitemaps": self.sitemaps,
            "sitemap_facts": self.sitemap_facts(),
            "smallest_gap": None if smallest is None else smallest.gap,
            "under_interval": len(self.under),
        }


def collect(entries: list[dict[str, Any]], host: str, since: float | None = None) -> HostEvidence:
    """The evidence about *host* in *entries* (the audit log, any order);
    with *since*, only what happened from then on is listed, but gaps are
    measured from the requests before it (the first gap after the cut is
    evidence too)."""
    evidence = HostEvidence(host)
    answers: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.get("event") == "response" and e.get("id"):
            answers[e["id"]] = e
    for e in sorted(entries, key=lambda e: e.get("t", 0.0)):
        event = e.get("event")
        if event == "request":
            evidence.requests.append(_sent(e, answers.get(e.get("id") or "", {})))
        elif event == "decision":
            evidence.decisions.append(e)
        elif event == "purge":
            evidence.purges.append(e)
        elif event == "wait":
            evidence.waits.append(e)
        elif event == "sitemap":
            evidence.sitemaps.append(e)
    _measure_gaps(evidence.requests)
    if since is not None:
        evidence.requests = [r for r in evidence.requests if r.t >= since]
        evidence.decisions = [d for d in evidence.decisions if d.get("t", 0.0) >= since]
        evidence.purges = [p for p in evidence.purges if p.get("t", 0.0) >= since]
        evidence.waits = [w for w in evidence.waits if w.get("t", 0.0) >= since]
        evidence.sitemaps = [m for m in evidence.sitemaps if m.get("t", 0.0) >= since]
    return evidence


def _sent(e: dict[str, Any], answer: dict[str, Any]) -> Sent:
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
        status=answer.get("status"),
        error=answer.get("error"),
        hold_until=answer.get("hold_until"),
        hold_by=answer.get("hold_by"),
    )


def _measure_gaps(requests: list[Sent]) -> None:
    """Per exact host, in time order: the gap since the previous request and
    the interval that applied (the interval R4 required as the request was
    sent, or longer while an R5 hold from an earlier answer ran)."""
    previous: dict[str, Sent] = {}
    holds: dict[str, tuple[float, str]] = {}
    for r in requests:
        before = previous.get(r.host)
        if before is not None:
            r.gap = r.t - before.t
            required = r.interval if r.interval is not None else 1.0
            r.set_by = r.set_by or "floor"
            hold = holds.get(r.host)
            if hold is not None and hold[0] - before.t > required:
                required = hold[0] - before.t
                if r.set_by not in ("Retry-After", "backoff"):
                    r.set_by = hold[1]
            r.required = required
        previous[r.host] = r
        if r.hold_until is not None and r.hold_until > holds.get(r.host, (0.0, ""))[0]:
            holds[r.host] = (r.hold_until, r.hold_by or "backoff")


def by_host(entries: list[dict[str, Any]], since: float | None = None) -> dict[str, HostEvidence]:
    """The evidence for each exact host in *entries* (one pass, for the summary)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e.get("host"):
            grouped.setdefault(e["host"], []).append(e)
    out = {h: collect(grouped[h], h, since) for h in sorted(grouped)}
    return {
        h: ev
        for h, ev in out.items()
        if ev.requests or ev.decisions or ev.purges or ev.waits or ev.sitemaps
    }


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
