"""The shared :class:`~scrapy_walsh_research.state.protocols.HostClock`: one
per-host clock in Redis for every process on every machine.

Scrapy's delays are per process; N workers on one queue send N times the
allowed rate to a host. With ``WALSH_REDIS_URL`` set, every process takes
each request's slot from one per-host clock in Redis.

* **Atomic reservations.** :class:`RedisHostClock` reserves with a server-side
  Lua script (:data:`~.scripts.RESERVE`) that reads Redis's own ``TIME`` (one
  clock for all machines), checks ``max(last + interval, next, hold, lease)``
  and takes the slot in one step. The slot carries a *lease* until the
  request's response (or error) is committed, so a second process cannot
  slip in while a slow connect delays the first request onto the wire.
* **Data loss is detected.** An epoch key is written at start; if it vanishes
  (Redis restarted without persistence, or flushed), nobody knows when hosts
  were last contacted, so every host waits ``WALSH_MAX_CRAWL_DELAY`` first.
  What this worker last saw is kept on disk (:mod:`.journal`), so a Redis
  rolled back while no worker ran is noticed too.
* **Every answer passes the fleet's guard** (a Redis restart, a step of its
  clock: :class:`~.guard.FleetGuard`).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import task

from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.hostclock import RobotsIntervals
from scrapy_walsh_research.state.hostload import ALPHA, IDLE, JITTER, HostLoad
from scrapy_walsh_research.state.redis.connection import (
    RENEWALS_PER_LEASE,
    RedisConnection,
    unavailable,
)
from scrapy_walsh_research.state.redis.scripts import (
    ANSWER,
    COMMIT,
    HELLO,
    HOLD,
    INTERVAL,
    READY,
    RENEW,
    RESERVE,
)

if TYPE_CHECKING:
    from redis import asyncio as aioredis
    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy
    from scrapy_walsh_research.state.hostload import Answer
    from scrapy_walsh_research.state.redis.journal import FleetJournal

logger = logging.getLogger(__name__)


class RedisHostClock(RobotsIntervals):
    """The :class:`~scrapy_walsh_research.state.protocols.HostClock` in Redis.

    Redis holds the truth, on its own clock; this process keeps a cache of
    when each host is next ready (its own monotonic clock), its hold and its
    robots.txt interval, for the scheduler, fed by every answer.

    Intervals get ``WALSH_REDIS_MARGIN`` (50 ms) added: workers on different
    machines reach a host over paths of different length, so two requests
    spaced exactly one interval apart when sent can arrive closer than that.
    A host's robots.txt intervals live in its Redis record, so every worker's
    reservation keeps the strictest, whoever read it.

    What a host's answers say (load, distress, a host given up) lives in its
    Redis record too, folded in by one script per answer, so one worker's
    signal slows every worker's next reservation at once.

    A reservation is leased for ``WALSH_REDIS_LEASE`` seconds and renewed
    while its request is in flight; a worker that dies frees the host when
    its lease runs out. A grant this worker cannot keep renewing (Redis
    unreachable) must not be used: :meth:`grant_valid` says so, and the wire
    handler refuses to send on an expired grant.
    """

    def __init__(
        self,
        conn: RedisConnection,
        *,
        lease: float,
        pause_on_loss: float | None = None,
        margin: float = defaults.WALSH_REDIS_MARGIN,
        journal: FleetJournal | None = None,
        cache_size: int | None = None,
    ) -> None:
        super().__init__()
        self.conn = conn
        #: hosts whose local view is kept (None: all); see :meth:`_forget_settled`
        self.cache_size = cache_size
        self.lease = lease
        self.margin = margin
        self.journal = journal
        if pause_on_loss is not None:  # else the connection's (lost_history_wait)
            conn.guard.pause = pause_on_loss
        self._reserve = conn.client.register_script(RESERVE)
        self._renew = conn.client.register_script(RENEW)
        self._commit = conn.client.register_script(COMMIT)
        self._hold = conn.client.register_script(HOLD)
        self._interval = conn.client.register_script(INTERVAL)
        self._ready_script = conn.client.register_script(READY)
        self._answer = conn.client.register_script(ANSWER)
        self._hello = conn.client.register_script(HELLO)
        self._epoch: str | None = None
        self._gen = journal.gen if journal else 0
        #: when Redis was last seen holding that epoch and generation (its clock)
        self._viewed = 0.0
        self._owner_prefix = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        #: host -> (owner, local monotonic time until which the grant is ours)
        self._grants: dict[str, tuple[str, float]] = {}
        #: host -> when its grant was taken, on Redis's clock (see RENEW)
        self._granted_at: dict[str, float] = {}
        self._renewer: Any = None
        self._ready: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._held: dict[str, float] = {}
        #: what each host's answers said, as Redis last told this worker
        self._loads: dict[str, HostLoad] = {}

    @classmethod
    def from_crawler(cls, crawler: Crawler, conn: RedisConnection) -> Self:
        settings = conn.settings  # the crawler's (``state.factory`` made the connection)
        clock = cls(
            conn,
            lease=settings.redis_lease,
            margin=settings.redis_margin,
            journal=conn.journal,
            cache_size=settings.host_clock_cache_size,
        )
        crawler.signals.connect(clock.close, signal=signals.engine_stopped, weak=False)
        return clock

    @property
    def pause_on_loss(self) -> float:
        """How long every host waits once the fleet's history is lost: the
        connection's guard owns it."""
        return self.conn.guard.pause

    def _host_key(self, host: str) -> str:
        return self.conn.key("host", host)

    def _margins(self) -> float:
        return self.margin

    # -- the fleet's state: new, the same, lost or rolled back -------------------

    async def _ensure_epoch(self) -> str:
        if self._epoch is not None:
            return self._epoch
        known = self.journal.epoch if self.journal else ""
        seen = self.journal.gen if self.journal else 0
        guard = self.conn.guard
        await guard.prepare()
        run, quarantine, lost, clock, stamp, own = guard.keys()
        keys = [self.conn.key("epoch"), quarantine, self.conn.key("gen"), run, lost, clock,
                stamp, own]  # fmt: skip
        lossless, _, _, was, young, token, viewed = guard.args()
        # when the journal's epoch and generation were seen ('' if unknown)
        at = self.journal.at if self.journal else None
        args = [known, seen, uuid.uuid4().hex, self.pause_on_loss, lossless, was, young, token,
                viewed, "" if at is None else f"{at:.6f}"]  # fmt: skip
        asked = time.monotonic()
        verdict, epoch, gen, server_now, *tail = await self.conn.call(
            "start-up", lambda r: self._hello(keys=keys, args=args, client=r)
        )
        await guard.observe(float(server_now), asked, time.monotonic(), *tail[:3])
        self._epoch, self._gen = epoch, max(int(gen), seen)
        self._viewed = float(server_now)
        if self.journal:
            self.journal.saw(epoch, self._gen, self._viewed)
            self.journal.flush()
        if verdict in ("lost", "replaced", "rollback"):
            self._state_lost(verdict, marked=tail[4] == "1")
        return str(epoch)

    def _state_lost(self, why: str, marked: bool) -> None:
        """What this worker last saw of the fleet's state is gone (*why*);
        *marked*: the fleet's history was marked lost since, by the guard or
        another worker, so this is that loss, and it waits from then."""
        self.conn.inc_stat("state_lost")
        what = {
            "lost": "came back empty (restarted without persistence, or flushed)",
            "replaced": "holds another fleet's state than this worker last saw (it was emptied)",
            "rollback": "went back in time (restored from an older snapshot, or failed over to "
            "a replica that had not applied the last writes)",
        }[why]
        if marked:
            logger.info(
                "Redis at %(url)s %(what)s: the loss of the fleet's history seen since this "
                "worker last looked, so every host waits WALSH_MAX_CRAWL_DELAY from when a "
                "worker first saw it.",
                {"url": self.conn.shown_url, "what": what},
            )
            return
        logger.error(
            "Redis at %(url)s %(what)s: no one knows when hosts were last contacted, so every "
            "host waits %(p).0f s before its next request.",
            {"url": self.conn.shown_url, "what": what, "p": self.pause_on_loss},
        )

    # -- the scheduler's local view ----------------------------------------------

    def _note(self, host: str, wait: float) -> None:
        self._ready[host] = time.monotonic() + max(0.0, wait)

    def _note_strictest(self, host: str, seconds: Any, origin: Any, left: Any) -> None:
        if float(seconds) > 0 and origin:
            self._intervals.setdefault(host, {})[str(origin)] = (
                float(seconds),
                time.time() + float(left),
            )
            self._strictest[host] = (float(seconds), str(origin), time.time() + float(left))

    def _note_load(self, host: str, view: list[Any]) -> None:
        """The host's load and distress as a script returned them (see ADAPTIVE)."""
        _, average, last, distress, streak, gave_up_left, signals = view
        left = float(gave_up_left)
        counts = (pair.rpartition("=") for pair in str(signals).split(";") if pair)
        load = HostLoad(
            average=float(average), last=float(last), distress=float(distress),
            streak=int(float(streak)), gave_up_until=time.monotonic() + left if left > 0 else 0.0,
            signals={kind: int(n) for kind, _, n in counts},
        )  # fmt: skip
        if load == IDLE:
            self._loads.pop(host, None)
        else:
            self._loads[host] = load

    def host_load(self, host: str) -> HostLoad:
        return self._loads.get(host) or IDLE

    def ready_at(self, host: str, interval: float) -> float:
        last = self._last.get(host)
        ready = self._ready.get(host, 0.0)
        load = self._loads.get(host)
        if load is not None:
            ready = max(ready, load.gave_up_until)
        return max(ready, last + interval) if last is not None else ready

    async def warm(self, host: str) -> None:
        if host in self._ready:
            return
        wait, held, *rest = await self.conn.call(
            "read host clock",
            lambda r: self._ready_script(
                keys=[self._host_key(host), self.conn.key("quarantine")], args=[1.0], client=r
            ),
        )
        # a hint only (the reservation decides): a time stored before Redis's
        # clock stepped back would otherwise keep the host idle for the step
        self._ready.setdefault(host, time.monotonic() + min(float(wait), self.pause_on_loss))
        if float(held) > 0:
            self._held.setdefault(host, time.monotonic() + float(held))
        self._note_strictest(host, *rest[:3])
        self._note_load(host, rest[3:])
        if self.cache_size is not None and len(self._ready) > self.cache_size:
            self._forget_settled(keep=host)

    #: hosts looked at per pass, so one pass costs O(1)
    FORGET_SCAN = 32

    def _forget_settled(self, keep: str) -> None:
        """Drop the local view of the oldest hosts beyond the bound that are
        settled (ready, not held, no grant of ours): Redis holds their clock
        and every reservation is decided there, so forgetting one only costs
        a read when it is next warmed."""
        now = time.monotonic()
        for host in list(itertools.islice(self._ready, self.FORGET_SCAN)):
            if len(self._ready) <= (self.cache_size or 0):
                return
            if host == keep or host in self._grants:
                continue
            last = self._last.get(host)
            if (
                self._ready[host] > now
                or self._held.get(host, 0.0) > now
                or (last is not None and now - last < self.pause_on_loss)
                or self.host_load(host).gave_up_until > now
            ):
                continue
            for view in (self._ready, self._last, self._held, self._intervals, self._strictest,
                         self._loads):  # fmt: skip
                view.pop(host, None)
            self.conn.inc_stat("host_views_forgotten")

    # -- taking and releasing a slot ------------------------------------------------

    async def reserve(self, host: str, now: float, interval: float) -> float:
        owner = f"{self._owner_prefix}-{next(self._seq)}"
        guard = self.conn.guard
        while True:
            epoch = await self._ensure_epoch()
            run, quarantine, lost, clock, stamp, own = guard.keys()
            keys = [
                self._host_key(host), self.conn.key("epoch"), quarantine, self.conn.key("gen"),
                run, lost, clock, self.conn.key("clockq"), stamp, own,
            ]  # fmt: skip
            lossless, _, checked, seen, young, token, viewed = guard.args()
            args: list[str | float] = [
                interval + self.margin, self.lease, epoch, owner, self.pause_on_loss,
                self._gen, self._margins(), lossless, checked, guard.unsure, guard.since,
                seen, young, token, viewed, f"{self._viewed:.6f}" if self._viewed else "",
            ]  # fmt: skip

            async def take(
                r: aioredis.Redis, keys: list[str] = keys, args: list[str | float] = args
            ) -> Any:
                return await self._reserve(keys=keys, args=args, client=r)

            asked = time.monotonic()
            status, value, gen, *rest = await self.conn.call("reserve", take)
            answered = time.monotonic()
            # rest: the strictest robots.txt interval (3; when the state was
            # lost: whether that loss was marked already, '', '0'), the
            # guard's {now, run, lost, clock} (4), then the host's adaptive
            # state (7; absent when the state was lost)
            iv, (server_now, *seen), load = rest[:3], rest[3:7], rest[7:]
            stepped = await guard.observe(float(server_now), asked, answered, *seen)
            if status in ("lost", "replaced", "rollback"):
                self._state_lost(status, marked=iv[0] == "1")
                self._epoch, self._gen = value, max(self._gen, int(gen))
                self._viewed = float(server_now)
                continue
            self._note_load(host, load)
            if status == "wait":
                self._after_answer(epoch, gen, host, iv, float(server_now))
                self._note(host, float(value))
                return float(value)
            try:
                self._after_answer(epoch, gen, host, iv, float(server_now))
            except BaseException:
                # The slot is ours in Redis: never leave it leased to nobody.
                await self._release(host, owner)
                raise
            if stepped:
                # Taken on a clock that had just jumped: the host's last
                # request may be more recent than it looked. Not used; the
                # clock quarantine is recorded, so the next try waits it out.
                await self._release(host, owner)
                continue
            if answered - asked > self.lease / RENEWALS_PER_LEASE:
                # The answer took so long that the lease may be nearly over
                # by the time the request could leave: do not use it.
                self.conn.inc_stat("stale_grants")
                await self._release(host, owner)
                continue
            self._grants[host] = (owner, asked + self.lease)
            self._granted_at[host] = float(server_now)
            self._start_renewing()
            self._last[host] = time.monotonic()
            self._note(host, interval)
            return 0.0

    def _after_answer(
        self, epoch: str, gen: Any, host: str, iv: list[Any], server_now: float
    ) -> None:
        # Redis holds this epoch, and at least this generation, as of now
        self._gen = max(self._gen, int(gen))
        self._viewed = server_now
        if self.journal:
            self.journal.saw(epoch, self._gen, server_now)
        self._note_strictest(host, *iv)

    def grant_valid(self, host: str) -> bool:
        """Whether this worker may still send the request it reserved for *host*."""
        grant = self._grants.get(host)
        return grant is None or time.monotonic() < grant[1]

    def _start_renewing(self) -> None:
        if self._renewer is None or not self._renewer.running:
            # deferred_from_coro runs it as an asyncio task, as redis.asyncio needs
            self._renewer = task.LoopingCall(lambda: deferred_from_coro(self._renew_all()))
            self._renewer.start(self.lease / RENEWALS_PER_LEASE, now=False).addErrback(
                lambda f: logger.error("lease renewal stopped: %(f)s", {"f": f.getErrorMessage()})
            )

    async def _renew_all(self) -> None:
        lost = self.conn.guard.keys()[2]
        for host, (owner, valid_until) in list(self._grants.items()):
            asked = time.monotonic()
            if asked >= valid_until:
                # never used once run out (grant_valid): renewing it, or
                # putting back a lease Redis lost, would only hold the host
                continue
            keys = [self._host_key(host), lost]
            args: list[str | float] = [owner, self.lease, self._granted_at.get(host, 0.0)]
            try:
                ours = await self._renew(keys=keys, args=args)
            except Exception as exc:
                if unavailable(exc):  # unreachable: the grant runs out on its own
                    continue
                raise
            if ours and self._grants.get(host, ("",))[0] == owner:
                self._grants[host] = (owner, asked + self.lease)
        if not self._grants and self._renewer is not None and self._renewer.running:
            self._renewer.stop()

    async def _release(self, host: str, owner: str) -> None:
        """Give back a grant that will not be used: as a commit at its own time."""
        await self.conn.call(
            "commit",
            lambda r: self._commit(
                keys=[self._host_key(host)],
                args=[0.0, self.margin, owner, self._margins()],
                client=r,
            ),
        )

    async def commit(self, host: str, at: float, interval: float) -> None:
        owner, _ = self._grants.pop(host, ("", 0.0))
        self._granted_at.pop(host, None)
        age = max(0.0, time.monotonic() - at)
        wait = await self.conn.call(
            "commit",
            lambda r: self._commit(
                keys=[self._host_key(host)],
                args=[age, interval + self.margin, owner, self._margins()],
                client=r,
            ),
        )
        self._last[host] = at
        self._note(host, min(float(wait), interval + self.margin))  # a hint, as in warm()

    async def hold(self, host: str, until: float) -> None:
        seconds = max(0.0, until - time.monotonic())
        wait = await self.conn.call(
            "hold", lambda r: self._hold(keys=[self._host_key(host)], args=[seconds], client=r)
        )
        self._note(host, float(wait))
        self._held[host] = max(self._held.get(host, 0.0), time.monotonic() + float(wait))

    def held_until(self, host: str) -> float:
        return self._held.get(host, 0.0)

    async def note_answer(
        self, host: str, answer: Answer, policy: AdaptivePolicy, floor: float
    ) -> str:
        rt = "" if answer.response_time is None else answer.response_time
        args = [
            rt, answer.signal or "", floor, policy.factor, policy.max_delay, policy.backoff,
            policy.recovery, policy.give_up, answer.jitter, ALPHA, JITTER, self._margins(),
        ]  # fmt: skip
        event, *view = await self.conn.call(
            "note answer",
            lambda r: self._answer(keys=[self._host_key(host)], args=args, client=r),
        )
        self._note_load(host, view)
        return str(event)

    async def note_interval(self, host: str, origin: str, seconds: float, expires: float) -> None:
        ttl = expires - self.conn.time()  # *expires* is on the fleet's clock
        self._note_interval(host, origin, seconds, time.time() + ttl)
        iv = await self.conn.call(
            "note interval",
            lambda r: self._interval(
                keys=[self._host_key(host)],
                args=[origin, seconds, ttl, self._margins()],
                client=r,
            ),
        )
        self._note_strictest(host, *iv)
        self._ready.pop(host, None)  # its next allowed time may have moved: read it again
        await self.warm(host)

    async def close(self) -> None:
        if self._renewer is not None and self._renewer.running:
            self._renewer.stop()
        if self.journal:
            self.journal.flush()
