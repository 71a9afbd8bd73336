"""The interfaces the gates use for state, and nothing else.

Every gate talks to a :class:`StateStore` and a :class:`HostClock`; which
backend answers (SQLite and in-process clocks, or Redis for a fleet) is
chosen once, in :mod:`scrapy_walsh_research.state.factory`. What only a
shared backend can do (one worker fetching for the fleet, losing history,
holding the fleet's records) is still a member here, with the local
backend's answer, so a caller never asks which backend it has.

This module imports no backend: the backends import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.state.hostload import Answer, HostLoad


class FlightBusy(Exception):
    """Another worker is doing this (a robots.txt or blocklist fetch) and the
    caller could not wait for it."""


class StateStore(Protocol):
    """Namespaced JSON key/value store.

    Writes are durable when :meth:`put` returns: a crash right after must not
    lose them (R3 retention, R7 validators). The calls are coroutines because
    a shared backend talks to a server, and nothing may block the reactor.

    A namespace keyed by URL or origin
    (:data:`~scrapy_walsh_research.state.namespaces.BY_HOST`) keeps an entry
    for its retention after it was last written
    (:func:`~scrapy_walsh_research.state.namespaces.retention`); older ones
    are gone, or not read. The others keep what is written until it is
    deleted.
    """

    async def get(self, namespace: str, key: str) -> Any | None: ...

    async def put(self, namespace: str, key: str, value: Any) -> None: ...

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]: ...

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        """Write all *values* atomically (one transaction)."""
        ...

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        """Store *value* unless *key* exists; return the stored value (atomic:
        two callers racing both get the first one's value)."""
        ...

    async def delete(self, namespace: str, key: str) -> None: ...

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        """The keys of *namespace* starting with *prefix* (for a purge: not on
        a hot path; a prefix reads only its range)."""
        ...

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        """Delete all *keys* (one transaction)."""
        ...

    async def hosts(self, namespace: str) -> list[str]:
        """The hosts *namespace* holds keys about (the host of each key's
        URL, :func:`~scrapy_walsh_research.state.namespaces.key_host`): a
        purge's candidates, not on a hot path."""
        ...

    async def forget(self, namespace: str, host: str) -> int:
        """Delete every key of *namespace* about *host* (its URL's host is
        *host*), also any not read any more for its age; how many went."""
        ...

    async def put_blob(self, name: str, data: bytes) -> None:
        """Store a large value (the adopted blocklist: tens of MB) as bytes,
        durably, without holding the reactor while it is written."""
        ...

    async def get_blob(self, name: str) -> bytes | None: ...

    async def delete_blob(self, name: str) -> None: ...

    async def history_complete(self) -> bool:
        """Whether the store holds everything ever written to it, as far as
        can be told: False for a shared store that lost or may have lost
        data (a Redis restarted without AOF appendfsync always, or without
        the fleet's records). The
        blocklist fails open on a first-ever failure only when this is True."""
        ...

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Call *callback* (in the background) when this process first finds
        the store's history marked unknown, so it can write again what it
        holds that the store may have lost. The embedded store (a file on
        this machine) cannot lose history while the crawl runs, and never
        calls it."""
        ...

    def time(self) -> float:
        """Wall-clock now on the clock every user of this store shares (Redis's
        for a fleet): timestamps written here are compared by other
        processes, which must not depend on their clocks agreeing."""
        ...

    @property
    def shared(self) -> bool:
        """Whether this is the store a fleet's workers share (Redis): what one
        stores only for the others is worth writing then."""
        ...

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        """Let one process at a time do *name* (fetch a robots.txt, the
        blocklist): returns a release coroutine if this process should do it
        now, or None once the process doing it is done (it stored the result:
        read it). Held at most *ttl* seconds, and a holder that dies costs the
        others its lock's lease, not *ttl*. A waiter that cannot wait
        *max_wait* seconds gets :class:`FlightBusy` (it can serve other work
        and come back). A store no fleet shares always says: do it now."""
        ...

    async def purge_records(
        self,
        matches: Callable[[str], bool],
        cause: Callable[[str], str],
        now: str,
        host: str | None = None,
    ) -> dict[str, dict[str, int]]:
        """Purge on opt-out for the records this store holds (the records of
        lines fed through a shared target queue): a record of a host
        *matches* accepts keeps only its line and outcome, and says it was
        purged at *now* and why (``cause(host)``). Only *host* when given.
        {host: {"records": n, "claims": n}}; empty for a store that holds no
        records (without Redis, records are the files the crawl exported)."""
        ...

    async def close(self) -> None: ...


class CadenceStore(Protocol):
    """R8's state: each target's last fetch, by its key (wall time on the
    clock every user of the store shares), and, with a fleet, the claim a
    worker holds on a target while it fetches it.

    The embedded backend keeps the fetch times in the state store and claims
    nothing (one process fetches each target once); the shared backend
    (:mod:`scrapy_walsh_research.state.redis.cadence`) also claims, so two
    workers never fetch one target at once.
    """

    @property
    def claims(self) -> bool:
        """Whether a target is claimed while it is fetched (a fleet)."""
        ...

    def time(self) -> float:
        """Wall-clock now, on the clock the fetch times are written in."""
        ...

    async def last_fetch(self, key: str) -> float | None:
        """When the target *key* was last fetched (or answered 304), if known."""
        ...

    async def note_fetch(self, key: str, at: float) -> None:
        """The target *key* was fetched at *at* (durable when it returns)."""
        ...

    async def claim(self, key: str, interval: float) -> tuple[str, Any]:
        """Claim the target *key* for this worker: ``("granted", None)``;
        ``("recent", fetched_at)`` when it was fetched less than *interval*
        seconds ago; ``("taken", worker)`` when another live worker holds it.
        A claim this worker holds is granted again."""
        ...

    async def release(self, key: str) -> None:
        """This worker no longer fetches *key*: its claim goes, if it is still
        this worker's."""
        ...


class HostClock(Protocol):
    """Per-host timing state (R4, R5): when each host may next receive a
    request, the interval its robots.txt files ask for, and what its answers
    say about it (load and distress, :mod:`scrapy_walsh_research.state.hostload`).

    Times are this process's :func:`time.monotonic`; a shared backend maps
    them onto its own clock. Only :meth:`ready_at` is synchronous: the
    scheduler asks it on every decision, so it answers from what this
    process knows and never does I/O; a stale answer only costs a requeue.
    """

    async def reserve(self, host: str, now: float, interval: float) -> float:
        """Take the host's next slot if it is free at *now*.

        Returns 0 and records *now* as the host's last request when the host
        is ready (never seen, or *interval* after its last request and past
        any hold); else the seconds still to wait, recording nothing. Atomic:
        two callers never both get 0 within *interval*.
        """
        ...

    async def commit(self, host: str, at: float, interval: float) -> None:
        """The request reserved last reached the host at *at* (later than
        reserved) and has its answer: the next may come *interval* (the
        interval in force now, which the answer may have changed) after it.
        A shorter interval than the reservation's applies at once: the
        reservation's next allowed time only guards against a crash before
        the answer."""
        ...

    async def hold(self, host: str, until: float) -> None:
        """No request to *host* before *until* (Retry-After, backoff)."""
        ...

    def held_until(self, host: str) -> float:
        """The end of the host's hold as far as this process knows (0: none)."""
        ...

    async def note_interval(self, host: str, origin: str, seconds: float, expires: float) -> None:
        """*origin* (of *host*)'s robots.txt asks for *seconds* between requests,
        as read until *expires* (wall clock). The host's interval is the
        strictest of its origins' that are still current."""
        ...

    def robots_interval(self, host: str) -> tuple[float, str | None, bool]:
        """(seconds, origin, current) of the strictest robots.txt interval of
        *host* as far as this process knows, (0, None, False) when none.
        A reading past its expiry still spaces requests (it is the last word
        of the site until robots.txt is read again); *current* says whether
        it is still within its cache lifetime."""
        ...

    def ready_at(self, host: str, interval: float) -> float:
        """When the host may next receive a request, as far as this process knows
        (0 for a host never seen)."""
        ...

    async def warm(self, host: str) -> None:
        """Load what is stored about *host*, so :meth:`ready_at` knows it."""
        ...

    async def note_answer(
        self, host: str, answer: Answer, policy: AdaptivePolicy, floor: float
    ) -> str:
        """Fold one answer from *host* into its load and distress
        (:meth:`HostLoad.observe <scrapy_walsh_research.state.hostload.HostLoad.observe>`;
        *floor* is the host's interval without it) and return what happened.

        Atomic: answers of several workers to one host each count once. Called
        before the answered request's slot is released (:meth:`commit`), so no
        request leaves under the interval in force before the answer; stored
        before it returns, so a restart keeps it. A host whose ``gave_up_until``
        is ahead is not ready before then (:meth:`ready_at`).
        """
        ...

    def host_load(self, host: str) -> HostLoad:
        """The host's load and distress as far as this process knows (never I/O;
        a new :class:`HostLoad` for a host nothing is known about)."""
        ...

    def grant_valid(self, host: str) -> bool:
        """Whether the slot this process reserved for *host* is still its own
        (a shared clock's lease can run out while its server is unreachable)."""
        ...
