"""What a worker knows of the fleet's Redis: the guard every deciding call
passes through (:class:`FleetGuard`), on the Python side of
:data:`~.guard_scripts.GUARD`.

* **A restart, by anyone, is seen.** Every deciding script reads the
  fleet's own record of its Redis (run id and a token) against Redis's run id
  and what the worker last saw: a Redis that restarted without AOF
  ``appendfsync always`` may have rolled back writes, and one without the
  fleet's records lost them whatever its config says, so every host waits
  ``WALSH_MAX_CRAWL_DELAY``, and the fleet's history is marked unknown (the
  blocklist then never fails open). A worker that never ran sees a restart
  too, and takes a Redis only seconds old for one that may have lost a
  fleet's records (:attr:`FleetGuard.young`); an older one without AOF
  always and without the fleet's records costs nothing, but vouches for
  nothing it held before (:attr:`FleetGuard.vouched`). The guard reads
  ``INFO`` inside its scripts: a Redis that refuses it (renamed, an ACL)
  stops the crawl before anything is sent, saying what to allow; nothing
  guesses "no restart".
* **A failover is seen too.** A replica promoted after its primary died has
  the fleet's record but maybe not its last writes. Every guarded call
  stamps the fleet's stamp and the Redis's own copy, kept in its own AOF and
  never replicated: a Redis whose own copy is not the fleet's latest stamp
  did not write it, and its history counts as lost from now. The stamp's
  time is never earlier than any answer a worker got before it: a Redis
  whose stamp is older than this worker's latest answer (or its machine
  journal's) did not serve the fleet since, as when the endpoint fails back
  to an old primary.
* **Redis's clock is checked.** Each worker compares Redis's ``TIME`` with its
  own monotonic clock on every answer; a forward step makes stored times
  look older than they are, so the hosts contacted before it wait
  ``WALSH_MAX_CRAWL_DELAY``, and a grant taken on the stepped clock is never
  used.

The guard is one per connection (:class:`~.connection.RedisConnection`
makes it), and every user of the connection (the store, the host clock, the
target queue, the heartbeat) passes its answers through it; it reaches
Redis only through the connection's fail-closed retry loop
(:class:`GuardedConnection`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from redis.exceptions import ResponseError
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.errors import WalshConfigurationError, stop_refused
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.redis.guard_scripts import FLEET, PROBE, UNVOUCHED

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis import asyncio as aioredis
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.state.redis.journal import FleetJournal

logger = logging.getLogger(__name__)

T = TypeVar("T")


class GuardedConnection(Protocol):
    """What the guard needs of its connection
    (:class:`~.connection.RedisConnection`)."""

    client: aioredis.Redis
    journal: FleetJournal | None
    shown_url: str
    crawler: Crawler | None
    #: the longest a live worker takes to call Redis again
    recall: float

    def key(self, *parts: str) -> str: ...

    def inc_stat(self, name: str, count: int = 1) -> None: ...

    def note_server_time(self, server_now: float) -> None: ...

    async def call(self, what: str, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T: ...


#: the spider's close reason when the guard cannot run on this Redis
GUARD_REFUSED = "walsh_redis_guard_refused"

#: how far Redis's clock may drift from a worker's monotonic clock between two
#: answers without counting as a step: a fixed allowance, plus NTP's largest
#: slew rate (500 ppm) over the time between them
CLOCK_TOLERANCE_S = 0.02
CLOCK_SLEW = 5e-4

#: how often a worker that waits for another worker of its machine to finish
#: publishing again looks whether it has (or died: then it takes over)
PUBLISH_POLL_S = 0.5


class FleetGuard:
    """What a worker knows of the fleet's Redis across calls: the
    run of Redis it last saw, whether the fleet's history is whole, and
    Redis's clock against this process's monotonic clock.

    Every answer of a guarded script carries Redis's ``TIME``. Without a
    step, it lies between the previous answer's time plus the monotonic time
    from that answer to this request, and plus the time from that request to
    this answer; outside that (with :data:`CLOCK_TOLERANCE_S`), Redis's clock
    stepped. A forward step makes every stored time look older than it is:
    the worker records it in Redis at once (:data:`FLEET`) and never uses a
    grant from that answer. A step back only makes hosts wait longer (the
    reservation caps that at ``pause``). An answer found consistent is passed
    on with the next call as the fleet's *checked* clock, which a worker that
    joins later compares its first answer with: it cannot tell a step from
    idle time in between, so it judges older records as if all of it were a
    step, until a worker that was there checks a later time or ``pause``
    seconds pass (by then whatever was in force before it joined is over).
    """

    def __init__(
        self, conn: GuardedConnection, pause: float = defaults.WALSH_MAX_CRAWL_DELAY
    ) -> None:
        self.conn = conn
        #: WALSH_MAX_CRAWL_DELAY (at least WALSH_MIN_DELAY): how long any
        #: interval can last, so how long lost history can matter
        self.pause = pause
        #: Redis runs AOF with appendfsync always: a restart that keeps the
        #: fleet's records lost nothing
        self.lossless = False
        #: the fleet's record of Redis (``<run id>|<token>``) as this worker
        #: last saw it: records that vanish or are made again after this
        #: worker saw them are lost history (see :data:`~.guard_scripts.GUARD`)
        self.seen = ""
        #: the token that names the fleet's records if this worker makes them
        self.token = uuid.uuid4().hex
        self.lost = ""
        #: the latest server time of an answer to this worker: what it saw of
        #: the fleet's records then is what a loss it sees later is of
        self.viewed = 0.0
        self._fleet = conn.client.register_script(FLEET)
        self._probe = conn.client.register_script(PROBE)
        #: (server time, monotonic when asked, monotonic when answered)
        self._ref: tuple[float, float, float] | None = None
        self._checked = ""
        #: this worker's first answer (server time, monotonic), and the
        #: seconds of possible step before it (see the class docstring)
        self.since = 0.0
        self.unsure = 0.0
        self._joined = 0.0
        self.anchored = True
        self._on_lost: list[Callable[[], Awaitable[None]]] = []
        self._warned_back = False
        self._prepared: asyncio.Task[None] | None = None

    def keys(self) -> list[str]:
        """The guard's keys (G in :data:`~.guard_scripts.GUARD`): run,
        quarantine, lost, clock, stamp, own stamp."""
        key = self.conn.key
        return [key("run"), key("quarantine"), key("lost"), key("clock"), key("stamp"),
                key("stamp", "own")]  # fmt: skip

    @property
    def young(self) -> float:
        """How long after its start a Redis that holds none of the fleet's
        records may still be one that lost them: until every live worker of
        a fleet has called it again (it then finds its records gone and says
        so), and until no request made before the start binds a host
        (``pause``). A live worker calls within its longest retry backoff,
        or its next heartbeat, plus a connect timeout and a second; so a new
        fleet on a Redis that has been up that long pays nothing."""
        return max(self.pause, self.conn.recall)

    def args(self) -> list[Any]:
        """The guard's arguments (A in :data:`~.guard_scripts.GUARD`): lossless,
        pause, checked, seen, young, token, viewed."""
        checked = self._checked if self.anchored else ""
        lossless = "1" if self.lossless else "0"
        viewed = f"{self.viewed:.6f}" if self.viewed else ""
        return [lossless, self.pause, checked, self.seen, self.young, self.token, viewed]

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Call *callback* when this worker sees the fleet's history marked
        unknown (Redis restarted without AOF always, failed over, lost the
        fleet's records, or was met seconds old), unless a worker of this
        machine did for that loss already (the journal says which): what the
        machine holds that the fleet may have lost, it publishes again."""
        self._on_lost.append(callback)

    def joined(self, server_now: float, clock: str) -> None:
        """This worker's first answer: how much of a step it cannot rule out."""
        self.since, self._joined = server_now, time.monotonic()
        self.unsure = min(self.pause, max(0.0, server_now - float(clock))) if clock else 0.0
        self.anchored = self.unsure <= CLOCK_TOLERANCE_S

    async def observe(
        self, server_now: float, asked: float, answered: float, run: str, lost: str, clock: str
    ) -> float:
        """Check one answer; returns the forward step seen (0 if none), which
        is already recorded in Redis when this returns (at least this much:
        the round trips hide the rest, up to the second bound it logs)."""
        step = most = 0.0
        if self._ref is None:
            self.joined(server_now, clock)
        else:
            then, then_asked, then_answered = self._ref
            slack = CLOCK_TOLERANCE_S + CLOCK_SLEW * (answered - then_asked)
            low, high = then + (asked - then_answered), then + (answered - then_asked)
            if server_now > high + slack:
                # how far past the latest, and past the earliest, time the
                # old clock could show: the step lies between the two
                step, most = server_now - high, server_now - low
            elif server_now < low - slack:
                self._stepped_back(low - server_now)
        self._ref = (server_now, asked, answered)
        self.viewed = max(self.viewed, server_now)
        self.conn.note_server_time(server_now)
        if step:
            await self._record_step(step, most, server_now)
        else:
            self._checked = f"{server_now:.6f}"
        if not self.anchored and (
            (clock and float(clock) >= self.since) or time.monotonic() - self._joined >= self.pause
        ):
            self.anchored, self.unsure = True, 0.0
        self.seen = run or self.seen
        if lost and lost != self.lost:
            self.lost = lost
            self.conn.inc_stat("history_unknown")
            # in the background: a reservation does not wait for it
            deferred_from_coro(self._publish_again(lost))
        return step

    async def _publish_again(self, lost: str) -> None:
        """What this machine holds that the fleet may have lost, published
        again once per machine for the loss *lost*, by the first of its
        workers to see it (which warns); the others say so at INFO. The
        machine's journal notes the loss published only once everything is:
        a worker that fails, or dies while publishing (even by SIGKILL: the
        lock is the kernel's), leaves it to the next worker of the machine,
        and one that waits for the lock meanwhile takes it over."""
        journal = self.conn.journal
        if journal is None:
            self._warn_lost(lost)
            await self._publish_all()
            return
        while not journal.published(lost):
            with journal.publishing() as ours:
                if ours and not journal.published(lost):
                    self._warn_lost(lost)
                    if await self._publish_all():
                        journal.note_published(lost)
                    return
            await asyncio.sleep(PUBLISH_POLL_S)
        # this machine's workers published again what they held for this
        # loss: the wait it set is Redis's, and nothing is new
        logger.info(
            "The fleet's history in Redis at %(url)s is incomplete since %(t)s, as this "
            "machine's workers saw before (they published again what they held then): no "
            "worker fails open on the blocklist.",
            {"url": self.conn.shown_url, "t": time.ctime(float(lost))},
        )

    def _warn_lost(self, lost: str) -> None:
        logger.warning(
            "The fleet's history in Redis at %(url)s is incomplete since %(t)s (Redis "
            "restarted without AOF appendfsync always, failed over to a replica that may "
            "lack its last writes, came back without the fleet's records whatever its "
            "config, or was met only seconds old): hosts wait "
            "WALSH_MAX_CRAWL_DELAY from then, no worker fails open on the blocklist, and "
            "this worker publishes again what it holds.",
            {"url": self.conn.shown_url, "t": time.ctime(float(lost))},
        )

    async def _publish_all(self) -> bool:
        """Run every publisher (:meth:`on_history_lost`); whether all succeeded."""
        results = await asyncio.gather(
            *(callback() for callback in self._on_lost), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        for exc in failed:
            logger.error("Publishing again after Redis lost history failed: %(exc)s", {"exc": exc})
        return not failed

    def _stepped_back(self, seconds: float) -> None:
        self.conn.inc_stat("clock_steps_back")
        if not self._warned_back:
            self._warned_back = True
            logger.warning(
                "Redis's clock at %(url)s went back %(s).2f s (against this worker's monotonic "
                "clock): hosts contacted before wait up to WALSH_MAX_CRAWL_DELAY longer; "
                "politeness holds.",
                {"url": self.conn.shown_url, "s": seconds},
            )

    async def _record_step(self, seconds: float, most: float, server_now: float) -> None:
        self.conn.inc_stat("clock_steps")
        # both bounds: a single figure would be the lower one, which reads
        # 4.98 for a 5 s step as soon as the round trips take 20 ms
        logger.error(
            "Redis's clock at %(url)s jumped forward by %(s).2f to %(m).2f s (against this "
            "worker's monotonic clock; its round trips to Redis hide the exact figure): every "
            "stored time looks that much older than it is, so hosts contacted before wait "
            "%(p).0f s, and no grant taken on the stepped clock is used.",
            {"url": self.conn.shown_url, "s": seconds, "m": most, "p": self.pause},
        )
        # hosts whose last request (on the old clock) could still bind them:
        # reckoned with the larger bound, so a slow round trip around the
        # step (Redis paused) can only widen the set, never leave a host out
        since = server_now - most - self.pause - 1.0
        await self.check(step=(self.pause, since))

    async def check(self, step: tuple[float, float] | None = None) -> None:
        """One guarded call on its own (the heartbeat, the blocklist's question)."""
        await self.prepare()
        keys = [*self.keys(), self.conn.key("clockq")]
        args = [*self.args(), *(step if step else ("", ""))]
        asked = time.monotonic()
        _, now, run, lost, clock = await self.conn.call(
            "fleet check", lambda r: self._fleet(keys=keys, args=args, client=r)
        )
        if step is not None:
            # the step is recorded: this answer is on the new clock
            self._ref = (float(now), asked, time.monotonic())
            self.viewed = max(self.viewed, float(now))
            self.conn.note_server_time(float(now))
            return
        await self.observe(float(now), asked, time.monotonic(), run, lost, clock)

    async def prepare(self) -> None:
        """Before the first guarded call, once: check that the guard can see
        a restart on this Redis (else the crawl stops: :meth:`_refuse`), and
        read what a restart would cost with it (logged)."""
        if self._prepared is None:
            # one reading for every caller (reservations start together)
            self._prepared = asyncio.get_running_loop().create_task(self._read_redis())
        await asyncio.shield(self._prepared)

    async def _read_redis(self) -> None:
        journal = self.conn.journal
        if journal is not None and journal.at is not None:
            # this machine got that answer: a Redis with an older stamp did
            # not serve the fleet since (a worker that never ran sees it too)
            self.viewed = max(self.viewed, journal.at)
        try:
            run, up, own = await self.conn.call("check INFO", lambda r: self._probe(client=r))
        except ResponseError as exc:
            self._refuse(f"refuses it ({exc})")
        if not run or not up:
            self._refuse("answers INFO server without run_id or uptime_in_seconds")
        if not own:
            logger.warning(
                "Redis at %(url)s does not let a script write to its AOF alone "
                "(redis.set_repl): the guard cannot tell a restart of this Redis from a "
                "failover to a replica that may lack the last writes, so every restart counts "
                "as lost history (every host waits WALSH_MAX_CRAWL_DELAY).",
                {"url": self.conn.shown_url},
            )
        await self._read_persistence()

    def _refuse(self, problem: str) -> NoReturn:
        """The guard cannot see a Redis restart here, and never assumes there
        was none: nothing is sent, and the crawl stops."""
        conn = self.conn
        message = (
            f"Redis at {conn.shown_url} cannot run the fleet's guard: every script that "
            f"decides reads INFO server (run_id, uptime_in_seconds) to see a Redis restart "
            f"that lost the fleet's history, and this Redis {problem}. Without it a worker "
            "would have to guess there was no restart, so it sends nothing. Let the bundle's "
            "Redis user run INFO, also from scripts (ACL SETUSER <user> +info: INFO is in "
            "@dangerous, which '-@dangerous' removes; +@scripting for EVAL/EVALSHA), and do "
            "not rename or disable INFO (rename-command)."
        )
        conn.inc_stat("guard_refused")
        logger.error(message)
        if conn.crawler is not None:
            stop_refused(conn.crawler, GUARD_REFUSED, message)  # and scrapy crawl exits 1
        raise WalshConfigurationError(message)

    async def _read_persistence(self) -> None:
        conn = self.conn
        try:
            info = await conn.call("read persistence", lambda r: r.info("persistence"))
            save = (await conn.call("read config", lambda r: r.config_get("save"))).get("save", "")
            fsync = (await conn.call("read config", lambda r: r.config_get("appendfsync"))).get(
                "appendfsync", ""
            )
            evicts = (
                await conn.call("read config", lambda r: r.config_get("maxmemory-policy"))
            ).get("maxmemory-policy", "noeviction")
        except Exception as exc:  # CONFIG may be disabled on a managed Redis
            logger.info(
                "Redis persistence unknown (%(exc)s): a Redis restart counts as lost history "
                "(every host waits WALSH_MAX_CRAWL_DELAY after it).",
                {"exc": exc},
            )
            return
        aof = bool(int(info.get("aof_enabled", 0)))
        self.lossless = aof and fsync == "always"
        if aof:
            has = f"AOF with appendfsync {fsync}"
            costs = (
                "a crash loses nothing"
                if self.lossless
                else "a crash loses about a second of writes, so after a restart every host "
                "waits WALSH_MAX_CRAWL_DELAY from when a worker first sees it"
            )
        elif save:
            has = f"RDB snapshots only (save {save})"
            costs = (
                "a crash rolls the fleet's state back to the last snapshot, so after a restart "
                "every host waits WALSH_MAX_CRAWL_DELAY from when a worker first sees it, and "
                "the workers publish again the blocklist and records they hold"
            )
        else:
            has = "no persistence"
            costs = (
                "a restart loses every host clock, hold, record and claim, so every host then "
                "waits WALSH_MAX_CRAWL_DELAY from when a worker first sees it"
            )
        if evicts != "noeviction":
            costs += (
                f"; and with maxmemory-policy {evicts}, under memory pressure Redis drops keys "
                "of the fleet's state without a restart anyone could notice"
            )
        if self.lossless and evicts == "noeviction":
            logger.info(
                "Redis persistence at %(url)s: %(has)s, maxmemory-policy noeviction: %(costs)s.",
                {"url": self.conn.shown_url, "has": has, "costs": costs},
            )
            return
        if not self.lossless:
            costs += (
                ". Nor does anything vouch for what Redis held before the fleet's records, so "
                "a worker that holds no blocklist never fails open on a failed first fetch"
            )
        # one message, saying what to change (a Redis started plainly has
        # snapshots only: a new fleet meets this first of all)
        logger.warning(
            "Redis persistence at %(url)s: %(has)s: %(costs)s. For a Redis restart to cost the "
            "fleet nothing, put these lines in its redis.conf (and keep its data directory "
            "where it outlives the process): appendonly yes / appendfsync always / "
            "maxmemory-policy noeviction.",
            {"url": self.conn.shown_url, "has": has, "costs": costs},
        )

    async def recheck_persistence(self) -> None:
        """Read again whether Redis runs AOF with appendfsync always (the
        heartbeat does, every 5 s): a change made at runtime (``CONFIG
        SET``) counts from then. The guard keeps, in the fleet's stamp,
        whether every call on this run of Redis found it so, and judges the
        next restart by that (see :data:`~.guard_scripts.GUARD`)."""
        conn = self.conn
        try:
            info = await conn.call("read persistence", lambda r: r.info("persistence"))
            fsync = (await conn.call("read config", lambda r: r.config_get("appendfsync"))).get(
                "appendfsync", ""
            )
        except ResponseError:  # CONFIG refused since: unknown, so not lossless
            info, fsync = {}, "unknown"
        lossless = bool(int(info.get("aof_enabled", 0))) and fsync == "always"
        if self.lossless and not lossless:
            logger.warning(
                "Redis at %(url)s no longer runs AOF with appendfsync always (appendfsync "
                "%(fsync)s, aof_enabled %(aof)s): its next restart counts as lost history "
                "(every host waits WALSH_MAX_CRAWL_DELAY after it), whatever config it "
                "restarts with.",
                {"url": conn.shown_url, "fsync": fsync, "aof": info.get("aof_enabled", "?")},
            )
        self.lossless = lossless

    @property
    def vouched(self) -> bool:
        """Whether the Redis the fleet's records were first made on vouched
        for what it held before: AOF with appendfsync always (a Redis without
        it, met with none of the fleet's records, may have come back older
        than an earlier fleet's; see :data:`~.guard_scripts.GUARD`)."""
        return not self.seen.partition("|")[2].startswith(UNVOUCHED)

    async def history_complete(self) -> bool:
        """Whether Redis holds all the fleet ever wrote, as far as anyone can
        tell: no loss seen since the fleet began (a restart without AOF
        always, a failover, a Redis met seconds old), and the fleet began on a
        Redis that vouched for what came before (:attr:`vouched`)."""
        await self.check()
        return not self.lost and self.vouched
