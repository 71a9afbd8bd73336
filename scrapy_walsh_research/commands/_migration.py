"""What ``scrapy walsh-migrate`` carries from a single crawl's state
directory (the SQLite store under ``WALSH_STATE_DIR``) into a fleet's Redis,
and the rule for each kind of state.

Both sides are read and written through their interfaces only: the
:class:`~scrapy_walsh_research.state.protocols.StateStore` (``get_many``,
``put_many``, ...) and the
:class:`~scrapy_walsh_research.state.protocols.HostClock` (``hold``), never
Redis keys, so the Redis layout stays the backend's to change.

Nothing newer in the fleet is replaced by something older, and a second run
finds nothing left to carry:

* per target and per origin, key by key, the newer wins, by the time each
  value carries: R8 cadence (the last fetch), the last 2xx/304 answer, the
  sitemaps' tables, trust and history;
* validators (R7) go with the fetch they came from: they are carried when
  the target's local cadence is newer than the fleet's (or the fleet knows
  nothing of the target);
* first-seen stamps are carried only where the fleet has none;
* an origin's robots.txt and tdmrep.json answers (copies, 4xx, failed
  fetches with their backoff) are carried only where the fleet has no
  answer for that document: what the fleet knows of a site's rules is never
  replaced;
* the adopted blocklist is carried when it is newer than the fleet's; its
  bytes are checked against their sha256 (every worker validates a stored
  copy against the schema before adopting it);
* host clocks (R4, R5): a host whose next request is not allowed yet (its
  interval after the last request, a Retry-After hold, a give-up) is held
  in the fleet until then (a hold only ever lengthens).

Nothing is carried about a host the fleet's own robots.txt copy shows opted
out, and the fleet's list in force purges again what it opts out: its purge
markers are reset, so the next worker to start purges the carried state
too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.core.contract import PRODUCT_TOKEN
from scrapy_walsh_research.core.robots_policy import RobotsPolicy
from scrapy_walsh_research.core.timestamps import utc_iso
from scrapy_walsh_research.core.urls import origin_of, url_host
from scrapy_walsh_research.documents.blocklist.store import STATE_NAMESPACE as BLOCKLIST
from scrapy_walsh_research.documents.blocklist.store import carry_adopted, purge_again
from scrapy_walsh_research.evidence.purge import stored_host
from scrapy_walsh_research.gates import preferences, robots
from scrapy_walsh_research.state.hostclock import PersistentHostClock
from scrapy_walsh_research.state.namespaces import (
    ANSWERED,
    CADENCE,
    CADENCE_CLAIMS,
    INTERNAL,
    LLMS_PROBES,
    SEEN,
    SITEMAP_DOCUMENTS,
    SITEMAP_HISTORY,
    SITEMAP_TRUST,
    VALIDATORS,
)

if TYPE_CHECKING:
    from scrapy_walsh_research.state.protocols import HostClock, StateStore
    from scrapy_walsh_research.state.sqlite import SQLiteStateStore

#: keys read and written per call
BATCH = 1000
#: carried key by key, the newer winning: where each value keeps its time
#: (None: the value is the time)
NEWER_WINS: dict[str, str | None] = {
    CADENCE: None,
    ANSWERED: None,
    SITEMAP_DOCUMENTS: "read_at",
    SITEMAP_TRUST: "at",
    SITEMAP_HISTORY: "at",
}
#: an origin document's namespaces: an origin's answers are carried together,
#: and only where the fleet has none of them
ORIGIN_DOCUMENTS: dict[str, tuple[str, ...]] = {
    "robots.txt": (robots.STATE_NAMESPACE, robots.ABSENT_NAMESPACE, robots.UNREACHABLE_NAMESPACE),
    "tdmrep.json": (preferences.STATE_NAMESPACE, preferences.UNREACHABLE_NAMESPACE),
}
#: what is left behind, and why
NOT_CARRIED = {
    INTERNAL: "the secret the bundle's own requests are marked with: the fleet has its own",
    CADENCE_CLAIMS: "claims of targets being fetched: none outlives its crawl",
    LLMS_PROBES: "which fed line probes an origin's /llms.txt: a fleet's own",
}


@dataclass
class Count:
    """What happened to one kind of state."""

    carried: int = 0
    #: the fleet's was as new or newer (or present, where only absence counts)
    kept: int = 0
    #: about a host the fleet's robots.txt copy shows opted out
    opted_out: int = 0

    def describe(self) -> str:
        text = f"{self.carried} carried, {self.kept} kept (the fleet's as new or newer)"
        return text + (f", {self.opted_out} of opted-out hosts left" if self.opted_out else "")


@dataclass
class Report:
    """What one migration did, kind by kind, in the order it did it."""

    counts: dict[str, Count] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)

    def count(self, what: str) -> Count:
        return self.counts.setdefault(what, Count())

    def note(self, what: str, text: str) -> None:
        self.notes.append((what, text))

    @property
    def carried(self) -> int:
        return sum(count.carried for count in self.counts.values())

    def table(self) -> str:
        rows = [(what, count.describe()) for what, count in self.counts.items()]
        return "\n".join(f"  {what:<20} {text}" for what, text in [*rows, *self.notes])


def _time(value: Any, where: str | None) -> float | None:
    raw = value.get(where) if where is not None and isinstance(value, dict) else value
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    return float(raw)


def _chunks(keys: list[str]) -> list[list[str]]:
    return [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]


class Migration:
    """Carry *source* (a single crawl's SQLite store) into *fleet* (Redis),
    and *source*'s host clocks into *clock* (the fleet's)."""

    def __init__(self, source: SQLiteStateStore, fleet: StateStore, clock: HostClock) -> None:
        self.source = source
        self.fleet = fleet
        self.clock = clock
        self.report = Report()
        #: hosts the fleet's robots.txt copies show opted out (``/`` disallowed)
        self.opted_out: set[str] = set()

    async def run(self) -> Report:
        per_target = (VALIDATORS, *NEWER_WINS, SEEN)
        keys = {ns: sorted(await self.source.keys(ns)) for ns in per_target}
        await self._find_opted_out({k for found in keys.values() for k in found})
        # validators first: they are judged by the fleet's cadence before it is carried
        await self._validators(keys[VALIDATORS])
        for namespace, where in NEWER_WINS.items():
            await self._newer_wins(namespace, keys[namespace], where)
        await self._absent_only(SEEN, keys[SEEN])
        if self.report.carried:
            await purge_again(self.fleet)
        for document, namespaces in ORIGIN_DOCUMENTS.items():
            await self._origin_document(document, namespaces)
        await self._blocklist()
        await self._host_clocks()
        self._left_behind()
        return self.report

    # -- per target -------------------------------------------------------------

    async def _find_opted_out(self, keys: set[str]) -> None:
        """Hosts whose robots.txt, as the fleet keeps it, disallows ``/`` to the
        bot: the fleet purged what it knew about them, and gets nothing back."""
        origins = sorted({origin_of(k.split("\t", 1)[0]) for k in keys if stored_host(k)})
        for chunk in _chunks(origins):
            copies = await self.fleet.get_many(robots.STATE_NAMESPACE, chunk)
            for origin, copy in copies.items():
                text = copy.get("text") if isinstance(copy, dict) else None
                if isinstance(text, str):
                    policy = RobotsPolicy.parse(text, PRODUCT_TOKEN)
                    if not policy.allows(f"{origin}/"):
                        self.opted_out.add(url_host(origin))

    def _allowed(self, keys: list[str], count: Count) -> list[str]:
        kept = [k for k in keys if stored_host(k) not in self.opted_out]
        count.opted_out += len(keys) - len(kept)
        return kept

    async def _validators(self, keys: list[str]) -> None:
        count = self.report.count(VALIDATORS)
        for chunk in _chunks(self._allowed(keys, count)):
            local = await self.source.get_many(VALIDATORS, chunk)
            theirs = await self.fleet.get_many(VALIDATORS, chunk)
            fetched = await self.source.get_many(CADENCE, chunk)
            their_fetched = await self.fleet.get_many(CADENCE, chunk)
            carry = {}
            for key, value in local.items():
                mine, other = _time(fetched.get(key), None), _time(their_fetched.get(key), None)
                unknown = key not in theirs and key not in their_fetched
                if unknown or (mine is not None and (other is None or mine > other)):
                    carry[key] = value
            await self.fleet.put_many(VALIDATORS, carry)
            count.carried += len(carry)
            count.kept += len(local) - len(carry)

    async def _newer_wins(self, namespace: str, keys: list[str], where: str | None) -> None:
        count = self.report.count(namespace)
        for chunk in _chunks(self._allowed(keys, count)):
            local = await self.source.get_many(namespace, chunk)
            theirs = await self.fleet.get_many(namespace, chunk)
            carry = {}
            for key, value in local.items():
                mine = _time(value, where)
                if key not in theirs:
                    carry[key] = value
                elif mine is not None:
                    other = _time(theirs[key], where)
                    if other is None or mine > other:
                        carry[key] = value
            await self.fleet.put_many(namespace, carry)
            count.carried += len(carry)
            count.kept += len(local) - len(carry)

    async def _absent_only(self, namespace: str, keys: list[str]) -> None:
        count = self.report.count(namespace)
        for chunk in _chunks(self._allowed(keys, count)):
            local = await self.source.get_many(namespace, chunk)
            theirs = await self.fleet.get_many(namespace, chunk)
            carry = {k: v for k, v in local.items() if k not in theirs}
            await self.fleet.put_many(namespace, carry)
            count.carried += len(carry)
            count.kept += len(local) - len(carry)

    # -- per origin -------------------------------------------------------------

    async def _origin_document(self, document: str, namespaces: tuple[str, ...]) -> None:
        """An origin's answers for *document*, carried together where the
        fleet has none: one answer (a copy, a 4xx, a failed fetch and its
        backoff) is what the gate reads, whichever namespace holds it."""
        count = self.report.count(document)
        origins = sorted({o for ns in namespaces for o in await self.source.keys(ns)})
        for chunk in _chunks(origins):
            known: set[str] = set()
            local: dict[str, dict[str, Any]] = {}
            for namespace in namespaces:
                known.update(await self.fleet.get_many(namespace, chunk))
                local[namespace] = await self.source.get_many(namespace, chunk)
            for namespace, values in local.items():
                carry = {o: v for o, v in values.items() if o not in known}
                await self.fleet.put_many(namespace, carry)
            carried = {o for values in local.values() for o in values if o not in known}
            count.carried += len(carried)
            count.kept += len({o for values in local.values() for o in values} - carried)

    # -- the blocklist and the host clocks --------------------------------------

    async def _blocklist(self) -> None:
        outcome, fetched_at = await carry_adopted(self.source, self.fleet)
        when = utc_iso(fetched_at) if fetched_at is not None else "?"
        self.report.note(
            "blocklist",
            {
                "carried": f"the adopted list (fetched {when}) carried",
                "kept": f"the fleet's kept, as new as this one (fetched {when}) or newer",
                "none": "none adopted here",
                "damaged": "not carried: the copy here is damaged (its document is missing "
                "or does not match its sha256)",
            }[outcome],
        )

    async def _host_clocks(self) -> None:
        """Every host whose next request is not allowed yet, held in the
        fleet until it is: its interval after the last request (at most
        ``WALSH_MAX_CRAWL_DELAY``, or the adaptive cap), a Retry-After hold,
        a give-up."""
        local = PersistentHostClock(self.source)
        held, longest = 0, 0.0
        for host in await self.source.keys(PersistentHostClock.NAMESPACE):
            await local.warm(host)
            ready = local.ready_at(host, 0.0)
            now = time.monotonic()
            if ready > now:
                await self.clock.hold(host, ready)
                held, longest = held + 1, max(longest, ready - now)
        self.report.note(
            "host clocks",
            f"{held} host(s) not to be contacted yet, held in the fleet until their next "
            f"request is allowed (the longest for {longest:.0f} s)",
        )

    def _left_behind(self) -> None:
        handled = {
            *NEWER_WINS, VALIDATORS, SEEN, BLOCKLIST, PersistentHostClock.NAMESPACE,
            *(ns for group in ORIGIN_DOCUMENTS.values() for ns in group),
        }  # fmt: skip
        for namespace in sorted(set(self.source.namespaces()) - handled):
            why = NOT_CARRIED.get(namespace, "not known to this version of the bundle")
            self.report.note("not carried", f"{namespace}: {why}")
