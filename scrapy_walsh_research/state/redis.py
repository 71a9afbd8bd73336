"""Shared backend: politeness state in Redis, one budget for many processes.

Scrapy's delays are per process; N workers on one queue send N times the
allowed rate to a host. With ``WALSH_REDIS_URL`` set, every process on every
machine takes each request's slot from one per-host clock in Redis, and
shares the stores (blocklist, robots copies, validators, cadence, first-seen).

* **Atomic reservations.** :class:`RedisHostClock` reserves with a server-side
  Lua script that reads Redis's own ``TIME`` (one clock for all machines),
  checks ``max(last + interval, next, hold, lease)`` and takes the slot in one
  step. The slot carries a *lease* until the request's response (or error)
  is committed, so a second process cannot slip in while a slow connect
  delays the first request onto the wire.
* **Fail closed.** Every call goes through :class:`RedisConnection`: when
  Redis is unreachable the call waits and retries with backoff, logging one
  error per outage; a request without a reservation never goes out, and a
  write waits until it is stored.
* **Data loss is detected.** An epoch key is written at start; if it vanishes
  (Redis restarted without persistence, or flushed), nobody knows when hosts
  were last contacted, so every host waits ``WALSH_MAX_CRAWL_DELAY`` first.
* **So is a restart, by anyone.** Every deciding script compares Redis's run
  id with the one the fleet last saw (:data:`GUARD`): a Redis that restarted
  without AOF ``appendfsync always`` may have lost or rolled back writes, so
  every host waits until ``WALSH_MAX_CRAWL_DELAY`` after Redis's start, and
  the fleet's history is marked unknown (the blocklist then never fails
  open). This needs no memory of the worker's own: one that never ran sees it.
* **Redis's clock is checked.** Each worker compares Redis's ``TIME`` with its
  own monotonic clock on every answer (:class:`FleetGuard`); a forward step
  makes stored times look older than they are, so the hosts contacted before
  it wait ``WALSH_MAX_CRAWL_DELAY``, and a grant taken on the stepped clock is
  never used.

All calls use ``redis.asyncio``: nothing blocks the reactor, which must be
the asyncio one (Scrapy's default).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import time
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from scrapy import signals

from scrapy_walsh_research.adaptive import ALPHA, IDLE, JITTER, HostLoad
from scrapy_walsh_research.bounds import cache_size
from scrapy_walsh_research.defaults import (
    WALSH_HOST_CLOCK_CACHE_SIZE as DEFAULT_HOST_CLOCK_CACHE_SIZE,
)
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.state.hostclock import RobotsIntervals, pause_on_loss
from scrapy_walsh_research.state.lua import GUARD

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from scrapy.crawler import Crawler
    from typing_extensions import Self

    from scrapy_walsh_research.adaptive import AdaptivePolicy, Answer

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: how long a reservation is leased; renewed every third of it while its
#: request is in flight, so a dead worker costs its host this long at most
DEFAULT_LEASE = 15.0
#: a worker's heartbeat lasts this long, renewed every third of it
HEARTBEAT_S = 15.0

#: errors that mean "Redis is not there right now", as opposed to a bug
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)

# Every script reads Redis's clock; f() keeps six decimals, so microseconds
# survive the round trip (Lua's default number format keeps fourteen digits).
PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function f(x) return string.format('%.6f', x) end
-- the strictest robots.txt interval of a host: {seconds, origin, seconds left}
local function strictest(key)
  local best, origin, left = 0, '', 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 3) == 'iv:' then
      local sep = string.find(all[i + 1], '|', 1, true)
      local s = tonumber(string.sub(all[i + 1], 1, sep - 1))
      if s > best then
        best, origin = s, string.sub(all[i], 4)
        left = tonumber(string.sub(all[i + 1], sep + 1)) - now
      end
    end
  end
  return {f(best), origin, f(left)}
end
"""

# What a host's answers said (scrapy_walsh_research.adaptive), kept in its
# hash: 'ad' the adaptive interval (factor x load, or distress), 'la'/'ll'
# the average and last response time, 'dd' the distress interval, 'ds' the
# answers in a row without a signal, 'dg' when a host given up may be
# contacted again, 'sg:<signal>' the signals since it was last at its floor.
ADAPTIVE = """
local function adaptive(key)
  local a = redis.call('HMGET', key, 'ad', 'la', 'll', 'dd', 'ds', 'dg')
  local signals = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 3) == 'sg:' then
      table.insert(signals, string.sub(all[i], 4) .. '=' .. all[i + 1])
    end
  end
  return {a[1] or '0', a[2] or '0', a[3] or '0', a[4] or '0', a[5] or '0',
          f(math.max(0, tonumber(a[6] or '0') - now)), table.concat(signals, ';')}
end
local function append(t, more) for _, v in ipairs(more) do table.insert(t, v) end return t end
"""

RESERVE = (
    PRELUDE
    + GUARD
    + ADAPTIVE
    + """
-- KEYS[1] host hash, KEYS[2] epoch, KEYS[3] quarantine, KEYS[4] generation
-- ARGV[1] interval s (with margins), ARGV[2] lease s, ARGV[3] epoch seen, ARGV[4] owner,
-- ARGV[5] pause s, ARGV[6] generation seen, ARGV[7] margins s
-- Issue 22: KEYS[5..7] run, lost, clock (GUARD), KEYS[8] clock quarantine;
-- ARGV[8] lossless, ARGV[9] checked, ARGV[10] seconds this worker cannot
-- rule out as a clock step before it joined, for records older than ARGV[11].
-- Every answer ends with {now, run, lost, clock} for the worker's guard.
local g = guard({KEYS[5], KEYS[3], KEYS[6], KEYS[7]}, {ARGV[8], ARGV[5], ARGV[9]})
local function answer(t)
  for _, v in ipairs({f(now), g[2], g[3], g[4]}) do table.insert(t, v) end
  return t
end
local epoch = redis.call('GET', KEYS[2])
local gen = tonumber(redis.call('GET', KEYS[4]) or '0')
if (not epoch) or epoch ~= ARGV[3] or gen < tonumber(ARGV[6]) then
  -- the state is gone or older than what this worker saw: no one knows when
  -- hosts were last contacted. Quarantine every host, keep the epoch and
  -- generation from going back, and let the worker log it.
  local why = 'rollback'
  if not epoch then why = 'lost' elseif epoch ~= ARGV[3] then why = 'replaced' end
  if not epoch then redis.call('SET', KEYS[2], ARGV[3]); epoch = ARGV[3] end
  local q = math.max(tonumber(redis.call('GET', KEYS[3]) or '0'), now + tonumber(ARGV[5]))
  redis.call('SET', KEYS[3], f(q))
  redis.call('SET', KEYS[6], f(now))  -- issue 22: the fleet's history is unknown
  if gen < tonumber(ARGV[6]) then redis.call('SET', KEYS[4], ARGV[6]) end
  return answer({why, epoch, redis.call('GET', KEYS[4]) or '0', '0', '', '0'})
end
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'hold', 'lease', 'owner', 'ad', 'dg')
local iv = strictest(KEYS[1])
local ad = adaptive(KEYS[1])
if h[4] and h[5] == ARGV[4] then
  return append(answer({'ok', h[1], tostring(gen), iv[1], iv[2], iv[3]}), ad)
end
local interval = math.max(tonumber(ARGV[1]), tonumber(iv[1]) + tonumber(ARGV[7]),
                          tonumber(h[6] or '0') + tonumber(ARGV[7]))
local ready = tonumber(redis.call('GET', KEYS[3]) or '0')
-- Issue 22: a clock stepped back makes stored times look later than they
-- are: no request is in the future, no next slot or lease further ahead
-- than it can be. Stored so, once (a cap from each new now would slide):
-- a step back then costs at most WALSH_MAX_CRAWL_DELAY, not the step.
local cap, fix = now + math.max(interval, tonumber(ARGV[5])), {}
if h[1] and tonumber(h[1]) > now then h[1] = f(now); table.insert(fix, 'last') end
if h[2] and tonumber(h[2]) > cap then h[2] = f(cap); table.insert(fix, 'next') end
if h[4] and tonumber(h[4]) > now + tonumber(ARGV[2]) then
  h[4] = f(now + tonumber(ARGV[2])); table.insert(fix, 'lease')
end
for _, field in ipairs(fix) do
  local i = ({last = 1, next = 2, lease = 4})[field]
  redis.call('HSET', KEYS[1], field, h[i])
end
if h[1] then ready = math.max(ready, tonumber(h[1]) + interval) end
if h[2] then ready = math.max(ready, tonumber(h[2])) end
if h[3] then ready = math.max(ready, tonumber(h[3])) end
local judged = now
if h[1] then
  -- Issue 22: a clock stepped forward makes them look earlier. Hosts last
  -- contacted before a step a worker saw wait out the clock quarantine.
  local cq = redis.call('GET', KEYS[8])
  if cq then
    local u, lo, hi = string.match(cq, '([^|]+)|([^|]+)|([^|]+)')
    local last = tonumber(h[1])
    if last >= tonumber(lo) and last < tonumber(hi) then ready = math.max(ready, tonumber(u)) end
  end
  -- A worker that joined after the fleet last checked the clock cannot rule
  -- out a step in between: it judges older records as if that were one.
  if tonumber(ARGV[10]) > 0 and tonumber(h[1]) < tonumber(ARGV[11]) then
    judged = now - tonumber(ARGV[10])
  end
end
if h[7] then ready = math.max(ready, tonumber(h[7])) end
if h[4] and tonumber(h[4]) > now then
  -- in flight from another worker: ready no sooner than its interval, and
  -- asked again shortly after, since its response usually ends the lease
  ready = math.max(ready, judged + math.min(tonumber(h[4]) - now, 0.25))
end
if ready > judged then
  return append(answer({'wait', f(ready - judged), tostring(gen), iv[1], iv[2], iv[3]}), ad)
end
gen = redis.call('INCR', KEYS[4])
redis.call('HSET', KEYS[1], 'last', f(now), 'next', f(now + interval),
           'lease', f(now + tonumber(ARGV[2])), 'owner', ARGV[4])
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(tonumber(ARGV[2])))
return append(answer({'ok', f(now), tostring(gen), iv[1], iv[2], iv[3]}), ad)
"""
)

RENEW = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] owner, ARGV[2] lease s. Extends the lease of a
-- request still in flight; 0 when it is no longer ours, or ran out (another
-- worker could have taken the host meanwhile: a late renewal revives nothing).
-- Issue 22: KEYS[2] the lost marker, ARGV[3] when the grant was taken (server
-- time). Redis lost the grant with the fleet's history (restarted empty or
-- older) while its request is out: the lease is put back, with the request
-- no earlier than now, unless another worker holds the host.
local h = redis.call('HMGET', KEYS[1], 'owner', 'lease')
if h[1] ~= ARGV[1] then
  local lost = tonumber(redis.call('GET', KEYS[2]) or '0')
  if lost <= tonumber(ARGV[3]) or (h[1] and tonumber(h[2] or '0') >= now) then return 0 end
  local last = math.max(tonumber(redis.call('HGET', KEYS[1], 'last') or '0'), now)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease', f(now + tonumber(ARGV[2])),
             'last', f(last))
  redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(tonumber(ARGV[2])))
  return 1
end
if tonumber(h[2] or '0') < now then return 0 end
redis.call('HSET', KEYS[1], 'lease', f(now + tonumber(ARGV[2])))
return 1
"""
)

COMMIT = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] seconds since the request went out, ARGV[2] interval,
-- ARGV[3] owner, ARGV[4] margins. The wire time is mapped onto the server clock
-- late, never early.
local at = now - tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'owner', 'ad')
local iv = strictest(KEYS[1])
local interval = math.max(tonumber(ARGV[2]), tonumber(iv[1]) + tonumber(ARGV[4]),
                          tonumber(h[4] or '0') + tonumber(ARGV[4]))
local last = math.max(at, tonumber(h[1] or '0'))
-- the interval in force now: a shorter one than the reservation's (an
-- answer that eased it) applies at once; 'last' still spaces the next one
local nxt = at + interval
redis.call('HSET', KEYS[1], 'last', f(last), 'next', f(nxt))
if h[3] == ARGV[3] then redis.call('HDEL', KEYS[1], 'lease', 'owner') end
redis.call('EXPIRE', KEYS[1], 86400)
return f(nxt - at - tonumber(ARGV[1]))
"""
)

HOLD = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] seconds from now
local until_ = now + tonumber(ARGV[1])
local hold = math.max(until_, tonumber(redis.call('HGET', KEYS[1], 'hold') or '0'))
redis.call('HSET', KEYS[1], 'hold', f(hold))
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(hold - now))
return f(hold - now)
"""
)

INTERVAL = (
    PRELUDE
    + """
-- KEYS[1] host hash; ARGV[1] origin, ARGV[2] seconds, ARGV[3] seconds it stays current,
-- ARGV[4] margins. One origin's robots.txt interval, where every reservation
-- sees it; the host's next allowed time moves with it at once.
redis.call('HSET', KEYS[1], 'iv:' .. ARGV[1], ARGV[2] .. '|' .. f(now + tonumber(ARGV[3])))
local iv = strictest(KEYS[1])
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '')
if last then
  local nxt = math.max(tonumber(redis.call('HGET', KEYS[1], 'next') or '0'),
                       last + tonumber(iv[1]) + tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'next', f(nxt))
end
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(math.max(0, tonumber(ARGV[3]))))
return iv
"""
)

READY = (
    PRELUDE
    + ADAPTIVE
    + """
-- KEYS[1] host hash, KEYS[2] quarantine; ARGV[1] interval. Seconds until ready
-- (a hint for the scheduler: a lease is ignored, the reservation checks it),
-- seconds until the host's hold (Retry-After) ends, its strictest interval,
-- and what its answers said.
local h = redis.call('HMGET', KEYS[1], 'last', 'next', 'hold', 'lease', 'dg')
local iv = strictest(KEYS[1])
local ready = tonumber(redis.call('GET', KEYS[2]) or '0')
if h[1] then ready = math.max(ready, tonumber(h[1]) + tonumber(ARGV[1])) end
for i = 2, 5 do if h[i] and i ~= 4 then ready = math.max(ready, tonumber(h[i])) end end
return append({f(math.max(0, ready - now)), f(math.max(0, tonumber(h[3] or '0') - now)),
               iv[1], iv[2], iv[3]}, adaptive(KEYS[1]))
"""
)

ANSWER = (
    PRELUDE
    + ADAPTIVE
    + """
-- KEYS[1] host hash. ARGV[1] response time s ('' for none), ARGV[2] distress
-- signal ('' for none), ARGV[3] the host's floor s, ARGV[4] factor, ARGV[5]
-- max delay, ARGV[6] backoff, ARGV[7] recovery, ARGV[8] give up s, ARGV[9]
-- jitter draw, ARGV[10] average weight, ARGV[11] jitter share, ARGV[12] margins.
-- One answer folded into the host's load and distress: HostLoad.observe in
-- scrapy_walsh_research/adaptive.py, step for step (a test runs both). The
-- host's next allowed time moves with it at once, for every worker.
local h = redis.call('HMGET', KEYS[1], 'la', 'll', 'dd', 'ds', 'dg', 'last', 'next')
local floor = math.max(tonumber(ARGV[3]), tonumber(strictest(KEYS[1])[1]))
local avg, lst = tonumber(h[1] or '0'), tonumber(h[2] or '0')
local dd, ds, dg = tonumber(h[3] or '0'), tonumber(h[4] or '0'), tonumber(h[5] or '0')
local factor, cap, backoff = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local signal, event = ARGV[2], 'load'
if ARGV[1] ~= '' then
  local rt = tonumber(ARGV[1])
  if avg <= 0 then avg = rt else avg = avg + tonumber(ARGV[10]) * (rt - avg) end
  lst = rt
  if signal == '' and factor * rt > cap then signal = 'slow answer' end
end
if signal ~= '' then
  redis.call('HINCRBY', KEYS[1], 'sg:' .. signal, 1)
  ds = 0
  if dd >= cap then
    dg = math.max(dg, now + tonumber(ARGV[8]))
    event = 'gave_up'
  else
    local raised = math.max(floor, dd) * backoff * (1 + tonumber(ARGV[11]) * tonumber(ARGV[9]))
    dd = math.min(cap, raised)
    event = 'raised'
  end
elseif dd > 0 then
  ds = ds + 1
  event = 'streak'
  if ds >= tonumber(ARGV[7]) then
    dd = dd / backoff
    event = 'eased'
    if dd <= floor * (1 + tonumber(ARGV[11])) then
      dd = 0
      ds = 0
      event = 'recovered'
      local all = redis.call('HKEYS', KEYS[1])
      for i = 1, #all do
        if string.sub(all[i], 1, 3) == 'sg:' then redis.call('HDEL', KEYS[1], all[i]) end
      end
    end
  end
end
local ad = math.max(math.min(cap, factor * math.max(lst, avg)), dd)
redis.call('HSET', KEYS[1], 'la', f(avg), 'll', f(lst), 'dd', f(dd), 'ds', tostring(ds),
           'dg', f(dg), 'ad', f(ad))
if h[6] then
  local nxt = math.max(tonumber(h[7] or '0'), tonumber(h[6]) + ad + tonumber(ARGV[12]))
  redis.call('HSET', KEYS[1], 'next', f(nxt))
end
redis.call('EXPIRE', KEYS[1], 86400 + math.ceil(math.max(0, dg - now)))
return append({event}, adaptive(KEYS[1]))
"""
)

HELLO = (
    PRELUDE
    + GUARD
    + """
-- KEYS[1] epoch, KEYS[2] quarantine, KEYS[3] generation
-- ARGV[1] epoch this worker knew ('' if none), ARGV[2] generation it saw,
-- ARGV[3] a new epoch, ARGV[4] pause s. Start-up: is this the state the
-- worker left (or a new fleet), or was it lost or rolled back?
-- Issue 22: KEYS[4..6] run, lost, clock; ARGV[5] lossless (see GUARD).
local g = guard({KEYS[4], KEYS[2], KEYS[5], KEYS[6]}, {ARGV[5], ARGV[4], ''})
local epoch = redis.call('GET', KEYS[1])
local gen = tonumber(redis.call('GET', KEYS[3]) or '0')
local verdict = 'same'
if not epoch then
  if ARGV[1] == '' then verdict = 'new' else verdict = 'lost' end
  epoch = ARGV[3]
  redis.call('SET', KEYS[1], epoch)
elseif ARGV[1] == '' then verdict = 'joined'
elseif epoch ~= ARGV[1] then verdict = 'replaced'
elseif gen < tonumber(ARGV[2]) then verdict = 'rollback'
end
if verdict == 'lost' or verdict == 'replaced' or verdict == 'rollback' then
  local q = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), now + tonumber(ARGV[4]))
  redis.call('SET', KEYS[2], f(q))
  redis.call('SET', KEYS[5], f(now))
  if gen < tonumber(ARGV[2]) then redis.call('SET', KEYS[3], ARGV[2]); gen = tonumber(ARGV[2]) end
end
return {verdict, epoch, tostring(gen), f(now), g[2], redis.call('GET', KEYS[5]) or '', g[4], g[1]}
"""
)

FLEET = (
    PRELUDE
    + GUARD
    + """
-- Issue 22: the guard alone, for a worker's heartbeat and the blocklist's
-- question "is the fleet's history whole?". With ARGV[4] (a step of Redis's
-- clock this worker measured): hosts last contacted in [ARGV[5], now) wait
-- until ARGV[4] seconds from now, and the clock counts as checked from now.
-- KEYS run, quarantine, lost, clock, clock quarantine; ARGV lossless, pause, checked
local g = guard({KEYS[1], KEYS[2], KEYS[3], KEYS[4]}, {ARGV[1], ARGV[2], ARGV[3]})
if ARGV[4] ~= '' then
  local u, lo = now + tonumber(ARGV[4]), tonumber(ARGV[5])
  local old = redis.call('GET', KEYS[5])
  if old then
    local ou, olo = string.match(old, '([^|]+)|([^|]+)|')
    u, lo = math.max(u, tonumber(ou)), math.min(lo, tonumber(olo))
  end
  redis.call('SET', KEYS[5], f(u) .. '|' .. f(lo) .. '|' .. f(now))
  redis.call('SET', KEYS[4], f(now))
  g[4] = f(now)
end
return {g[1], f(now), g[2], g[3], g[4]}
"""
)


#: how far Redis's clock may drift from a worker's monotonic clock between two
#: answers without counting as a step: a fixed allowance, plus NTP's largest
#: slew rate (500 ppm) over the time between them
CLOCK_TOLERANCE_S = 0.02
CLOCK_SLEW = 5e-4


class FleetGuard:
    """What a worker knows of the fleet's Redis across calls (issue 22): the
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

    def __init__(self, conn: RedisConnection, pause: float = 30.0) -> None:
        self.conn = conn
        #: WALSH_MAX_CRAWL_DELAY (at least WALSH_MIN_DELAY): how long any
        #: interval can last, so how long lost history can matter
        self.pause = pause
        #: Redis runs AOF with appendfsync always: a restart loses nothing
        self.lossless = False
        self.run = ""
        self.lost = ""
        self._fleet = conn.client.register_script(FLEET)
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
        key = self.conn.key
        return [key("run"), key("quarantine"), key("lost"), key("clock")]

    def args(self) -> list[Any]:
        return ["1" if self.lossless else "0", self.pause, self._checked if self.anchored else ""]

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Call *callback* when this worker first sees the fleet's history
        marked unknown (Redis restarted without AOF always, or lost data):
        what it holds that the fleet may have lost, it publishes again."""
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
        is already recorded in Redis when this returns."""
        step = 0.0
        if self._ref is None:
            self.joined(server_now, clock)
        else:
            then, then_asked, then_answered = self._ref
            slack = CLOCK_TOLERANCE_S + CLOCK_SLEW * (answered - then_asked)
            low, high = then + (asked - then_answered), then + (answered - then_asked)
            if server_now > high + slack:
                step = server_now - high
            elif server_now < low - slack:
                self._stepped_back(low - server_now)
        self._ref = (server_now, asked, answered)
        self.conn.note_server_time(server_now)
        if step:
            await self._record_step(step, server_now)
        else:
            self._checked = f"{server_now:.6f}"
        if not self.anchored and (
            (clock and float(clock) >= self.since) or time.monotonic() - self._joined >= self.pause
        ):
            self.anchored, self.unsure = True, 0.0
        self.run = run or self.run
        if lost and lost != self.lost:
            self.lost = lost
            self.conn._inc("history_unknown")
            logger.warning(
                "The fleet's history in Redis at %(url)s is incomplete since %(t)s (Redis "
                "restarted without AOF appendfsync always, or lost its data): hosts wait "
                "WALSH_MAX_CRAWL_DELAY from then, no worker fails open on the blocklist, and "
                "this worker publishes again what it holds.",
                {"url": self.conn.url, "t": time.ctime(float(lost))},
            )
            from scrapy.utils.defer import deferred_from_coro

            for callback in self._on_lost:
                # in the background: a reservation does not wait for it
                deferred_from_coro(callback()).addErrback(
                    lambda f: logger.error(
                        "Publishing again after Redis lost history failed: %(f)s",
                        {"f": f.getErrorMessage()},
                    )
                )
        return step

    def _stepped_back(self, seconds: float) -> None:
        self.conn._inc("clock_steps_back")
        if not self._warned_back:
            self._warned_back = True
            logger.warning(
                "Redis's clock at %(url)s went back %(s).2f s (against this worker's monotonic "
                "clock): hosts contacted before wait up to WALSH_MAX_CRAWL_DELAY longer; "
                "politeness holds.",
                {"url": self.conn.url, "s": seconds},
            )

    async def _record_step(self, seconds: float, server_now: float) -> None:
        self.conn._inc("clock_steps")
        logger.error(
            "Redis's clock at %(url)s jumped %(s).2f s forward (against this worker's monotonic "
            "clock): every stored time looks that much older than it is, so hosts contacted "
            "before wait %(p).0f s, and no grant taken on the stepped clock is used.",
            {"url": self.conn.url, "s": seconds, "p": self.pause},
        )
        # hosts whose last request (on the old clock) could still bind them
        since = server_now - seconds - self.pause - 1.0
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
            self.conn.note_server_time(float(now))
            return
        await self.observe(float(now), asked, time.monotonic(), run, lost, clock)

    async def prepare(self) -> None:
        """Read once what a Redis restart would cost with this Redis (logged),
        before the first guarded call: whether it keeps every write."""
        if self._prepared is None:
            # one reading for every caller (reservations start together)
            self._prepared = asyncio.get_running_loop().create_task(self._read_persistence())
        await asyncio.shield(self._prepared)

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
        self.lossless = bool(int(info.get("aof_enabled", 0))) and fsync == "always"
        if evicts != "noeviction":
            logger.warning(
                "Redis maxmemory-policy is %(p)s: under memory pressure Redis drops keys of the "
                "fleet's state (host clocks, the blocklist, records) without a restart anyone "
                "could notice. Set maxmemory-policy noeviction.",
                {"p": evicts},
            )
        if int(info.get("aof_enabled", 0)):
            logger.info(
                "Redis persistence: AOF (appendfsync %(f)s): a Redis crash loses %(loss)s.",
                {
                    "f": fsync,
                    "loss": "nothing"
                    if self.lossless
                    else "about a second, so after a restart every host waits "
                    "WALSH_MAX_CRAWL_DELAY from Redis's start",
                },
            )
        elif save:
            logger.warning(
                "Redis persistence: RDB snapshots only (save %(s)s): a Redis crash rolls the "
                "fleet's state back to the last snapshot; after a restart every host waits "
                "WALSH_MAX_CRAWL_DELAY from Redis's start, and workers publish again the "
                "blocklist and records they hold. Run Redis with appendonly yes.",
                {"s": save},
            )
        else:
            logger.warning(
                "Redis persistence: none: a Redis restart loses every host clock, hold, record "
                "and claim (every host then waits WALSH_MAX_CRAWL_DELAY from Redis's start). "
                "Run Redis with appendonly yes."
            )

    async def history_complete(self) -> bool:
        """Whether Redis holds all the fleet ever wrote, as far as anyone can
        tell: no restart without AOF always and no loss seen since the fleet
        began (a fresh Redis without AOF always counts as a restart)."""
        await self.check()
        return not self.lost


class RedisConnection:
    """One client per crawler, and the fail-closed retry loop every call takes."""

    _instances: weakref.WeakKeyDictionary[Crawler, RedisConnection] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        url: str,
        prefix: str = "walsh",
        *,
        crawler: Crawler | None = None,
        max_backoff: float = 10.0,
        timeout: float = 5.0,
    ) -> None:
        try:
            self.client = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
            )
        except ValueError as exc:
            raise WalshConfigurationError(
                f"WALSH_REDIS_URL={url!r} is not a Redis URL ({exc}); "
                "use redis://host:port/db or rediss://..."
            ) from None
        self.url = url
        self.prefix = prefix
        self.crawler = crawler
        self.max_backoff = max_backoff
        self._down_since: float | None = None
        #: Redis's clock minus ours, so timestamps this worker writes for
        #: others to compare are on the fleet's one clock (see :meth:`time`)
        self._offset = 0.0
        #: this process in the fleet: what it holds (lines in flight, cadence
        #: claims) is its own only while ``<prefix>:alive:<worker>`` exists
        self.worker = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._beat: Any = None
        #: what this worker knows of the fleet's Redis across calls (issue 22)
        self.guard = FleetGuard(self)

    async def announce(self) -> None:
        """Start this worker's heartbeat (once): others may take back what it
        holds once the heartbeat has been silent for HEARTBEAT_S."""
        if self._beat is not None:
            return
        from scrapy.utils.defer import deferred_from_coro
        from twisted.internet import task

        await self._heartbeat()
        self._beat = task.LoopingCall(lambda: deferred_from_coro(self._heartbeat()))
        self._beat.start(HEARTBEAT_S / 3, now=False).addErrback(
            lambda f: logger.error("heartbeat stopped: %(f)s", {"f": f.getErrorMessage()})
        )

    async def _heartbeat(self) -> None:
        key = self.key("alive", self.worker)
        await self.call("heartbeat", lambda r: r.set(key, "1", ex=int(HEARTBEAT_S)))
        # a restart or a step of Redis's clock is seen within a beat even
        # while this worker sends nothing (a worker joining meanwhile relies on it)
        await self.guard.check()

    def note_server_time(self, server_now: float) -> None:
        self._offset = server_now - time.time()

    def time(self) -> float:
        """Now, on Redis's clock (as last measured): the time to write into
        shared state, which other machines compare with their own now."""
        return time.time() + self._offset

    @classmethod
    def for_crawler(cls, crawler: Crawler) -> RedisConnection:
        conn = cls._instances.get(crawler)
        if conn is None:
            settings = crawler.settings
            conn = cls(
                settings["WALSH_REDIS_URL"],
                settings.get("WALSH_REDIS_PREFIX") or "walsh",
                crawler=crawler,
                max_backoff=settings.getfloat("WALSH_REDIS_MAX_BACKOFF", 10.0),
            )
            conn.guard.pause = pause_on_loss(settings)
            cls._instances[crawler] = conn
        return conn

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _inc(self, name: str, count: int = 1) -> None:
        # the crawler's stats exist only once the crawl starts; the spider
        # may open the connection before that
        try:
            stats = self.crawler.stats if self.crawler is not None else None
        except RuntimeError:
            return
        if stats is not None:
            stats.inc_value(f"walsh/redis/{name}", count)

    async def call(self, what: str, fn: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """Run *fn* until Redis answers: wait and reconnect, never skip it."""
        delay = 0.25
        while True:
            try:
                result = await fn(self.client)
            except UNAVAILABLE as exc:
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    self._inc("outages")
                    logger.error(
                        "Redis at %(url)s is unreachable (%(exc)s) during %(what)s: no request "
                        "goes out without a reservation and no state is dropped; waiting and "
                        "reconnecting.",
                        {"url": self.url, "exc": exc, "what": what},
                    )
                self._inc("retries")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            if self._down_since is not None:
                logger.warning(
                    "Redis at %(url)s is back after %(s).1f s; the crawl goes on.",
                    {"url": self.url, "s": time.monotonic() - self._down_since},
                )
                self._down_since = None
            return result

    async def close(self) -> None:
        if self._beat is not None and self._beat.running:
            self._beat.stop()
        await self.client.aclose()


class RedisStateStore:
    """The :class:`~scrapy_walsh_research.state.base.StateStore` in Redis: one
    hash per namespace, values as JSON. A write returns once Redis has it;
    durability beyond that is Redis's persistence (run it with AOF)."""

    def __init__(self, conn: RedisConnection) -> None:
        self.conn = conn
        self._renew_lock = conn.client.register_script(RENEW_LOCK)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(RedisConnection.for_crawler(crawler))

    def _hash(self, namespace: str) -> str:
        return self.conn.key("state", namespace)

    async def get(self, namespace: str, key: str) -> Any | None:
        raw = await self.conn.call(f"get {namespace}", lambda r: r.hget(self._hash(namespace), key))
        return json.loads(raw) if raw is not None else None

    async def put(self, namespace: str, key: str, value: Any) -> None:
        data = json.dumps(value, sort_keys=True)
        await self.conn.call(f"put {namespace}", lambda r: r.hset(self._hash(namespace), key, data))

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        if not keys:
            return {}
        raws = await self.conn.call(
            f"get {namespace}", lambda r: r.hmget(self._hash(namespace), keys)
        )
        return {k: json.loads(v) for k, v in zip(keys, raws, strict=True) if v is not None}

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        if not values:
            return
        mapping = {k: json.dumps(v, sort_keys=True) for k, v in values.items()}
        # one HSET: all fields or none
        await self.conn.call(
            f"put {namespace}", lambda r: r.hset(self._hash(namespace), mapping=mapping)
        )

    async def put_blob(self, name: str, data: bytes) -> None:
        key = self.conn.key("blob", name)
        await self.conn.call("put blob", lambda r: r.set(key, data))

    async def get_blob(self, name: str) -> bytes | None:
        key = self.conn.key("blob", name)
        raw = await self.conn.call("get blob", lambda r: r.get(key))
        return raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else raw

    async def delete_blob(self, name: str) -> None:
        key = self.conn.key("blob", name)
        await self.conn.call("delete blob", lambda r: r.delete(key))

    async def put_if_absent(self, namespace: str, key: str, value: Any) -> Any:
        data = json.dumps(value, sort_keys=True)
        name = self._hash(namespace)

        async def put(r: aioredis.Redis) -> str:
            await r.hsetnx(name, key, data)
            return await r.hget(name, key)

        return json.loads(await self.conn.call(f"put {namespace}", put))

    async def delete(self, namespace: str, key: str) -> None:
        await self.conn.call(f"delete {namespace}", lambda r: r.hdel(self._hash(namespace), key))

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "*"

        async def scan(r: aioredis.Redis) -> list[str]:
            # HSCAN (not HKEYS): a large hash is read in steps, not in one
            # blocking call; NOVALUES needs Redis 7.4, so values come too
            return [
                k async for k, _ in r.hscan_iter(self._hash(namespace), match=pattern, count=1000)
            ]

        return await self.conn.call(f"keys {namespace}", scan)

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            await self.conn.call(
                f"delete {namespace}", lambda r, c=chunk: r.hdel(self._hash(namespace), *c)
            )

    async def history_complete(self) -> bool:
        return await self.conn.guard.history_complete()

    def time(self) -> float:
        return self.conn.time()

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        """Let one worker at a time do *name*: returns a release coroutine if
        this worker should do it now, or None once the worker doing it is
        done. The lock is leased for LOCK_LEASE_S and renewed while its
        holder lives (at most *ttl* seconds), so a holder that dies costs the
        others that long at most, not *ttl*. A waiter that cannot wait
        *max_wait* seconds gets :class:`FlightBusy` (it can serve other work
        and come back)."""
        key = self.conn.key("lock", name)
        token = uuid.uuid4().hex
        lease_ms = int(LOCK_LEASE_S * 1000)
        if await self.conn.call("lock", lambda r: r.set(key, token, nx=True, px=lease_ms)):
            from scrapy.utils.defer import deferred_from_coro
            from twisted.internet import task

            until = time.monotonic() + ttl

            async def renew() -> None:
                if time.monotonic() < until:
                    await self.conn.call(
                        "renew lock",
                        lambda r: self._renew_lock(keys=[key], args=[token, lease_ms], client=r),
                    )

            renewer = task.LoopingCall(lambda: deferred_from_coro(renew()))
            renewer.start(LOCK_LEASE_S / 3, now=False).addErrback(
                lambda f: logger.error("lock renewal stopped: %(f)s", {"f": f.getErrorMessage()})
            )

            async def release() -> None:
                if renewer.running:
                    renewer.stop()

                async def drop(r: aioredis.Redis) -> None:
                    if await r.get(key) == token:
                        await r.delete(key)

                await self.conn.call("unlock", drop)

            return release
        waited_since = time.monotonic()
        while await self.conn.call("lock", lambda r: r.exists(key)):
            if max_wait is not None and time.monotonic() - waited_since >= max_wait:
                raise FlightBusy(name)
            await asyncio.sleep(0.1)
        return None

    async def close(self) -> None:
        await self.conn.close()


class FlightBusy(Exception):
    """Another worker is doing this (a robots.txt or blocklist fetch) and the
    caller could not wait for it."""


#: a single-flight lock's lease, renewed every third of it by its live holder
LOCK_LEASE_S = 10.0

RENEW_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class FleetJournal:
    """What this worker last saw of the fleet's Redis (epoch, generation),
    kept in its ``WALSH_STATE_DIR`` so that a Redis that comes back empty or
    older is noticed by any worker that ran before, whatever order the
    workers start in. Written at most once a second while the crawl runs and
    once at its end.

    Workers started from one project on one machine share that directory
    (it defaults to the project's), so a write merges with the file under a
    lock (the highest generation of the epoch wins) and goes through a temp
    file of its own. A journal that cannot be written is logged, never
    raised: it must not stop a request whose slot is already reserved.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.epoch, self.gen = self._read()
        self._written = (self.epoch, self.gen)
        self._at = 0.0
        self._warned = False

    def _read(self) -> tuple[str, int]:
        try:
            saved = json.loads(self.path.read_text())
            return str(saved.get("epoch") or ""), int(saved.get("gen") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            return "", 0

    def saw(self, epoch: str, gen: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.gen = epoch, gen
        else:
            self.gen = max(self.gen, gen)
        if time.monotonic() - self._at >= 1.0:
            self.flush()

    def flush(self) -> None:
        if (self.epoch, self.gen) == self._written or not self.epoch:
            return
        try:
            with _locked(self.path.with_name(self.path.name + ".lock")):
                epoch, gen = self._read()
                if epoch == self.epoch:
                    self.gen = max(self.gen, gen)
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"epoch": self.epoch, "gen": self.gen}))
                os.replace(tmp, self.path)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Cannot write the fleet journal %(path)s (%(exc)s): if Redis loses its "
                    "data, this worker will not notice it on its next start",
                    {"path": self.path, "exc": exc},
                )
            return
        self._written, self._at = (self.epoch, self.gen), time.monotonic()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes on this machine (none where the
    platform has no ``fcntl``: the per-process temp file still keeps writes whole)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class RedisHostClock(RobotsIntervals):
    """The :class:`~scrapy_walsh_research.state.hostclock.HostClock` in Redis.

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
        pause_on_loss: float,
        margin: float = 0.05,
        journal: FleetJournal | None = None,
        cache_size: int | None = None,
    ) -> None:
        super().__init__()
        self.conn = conn
        #: hosts whose local view is kept (None: all); see :meth:`_forget_settled`
        self.cache_size = cache_size
        self.lease = lease
        self.margin = margin
        self.pause_on_loss = pause_on_loss
        self.journal = journal
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
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy_walsh_research.state.base import state_dir

        settings = crawler.settings
        conn = RedisConnection.for_crawler(crawler)
        digest = hashlib.sha256(f"{conn.url}\x00{conn.prefix}".encode()).hexdigest()[:12]
        clock = cls(
            conn,
            lease=settings.getfloat("WALSH_REDIS_LEASE", DEFAULT_LEASE),
            margin=settings.getfloat("WALSH_REDIS_MARGIN", 0.05),
            pause_on_loss=pause_on_loss(settings),
            journal=FleetJournal(state_dir(crawler) / f"redis-fleet-{digest}.json"),
            cache_size=cache_size(
                settings, "WALSH_HOST_CLOCK_CACHE_SIZE", DEFAULT_HOST_CLOCK_CACHE_SIZE
            ),
        )
        crawler.signals.connect(clock.close, signal=signals.engine_stopped, weak=False)
        return clock

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
        run, quarantine, lost, clock = guard.keys()
        keys = [self.conn.key("epoch"), quarantine, self.conn.key("gen"), run, lost, clock]
        args = [known, seen, uuid.uuid4().hex, self.pause_on_loss, guard.args()[0]]
        asked = time.monotonic()
        verdict, epoch, gen, server_now, *tail = await self.conn.call(
            "start-up", lambda r: self._hello(keys=keys, args=args, client=r)
        )
        await guard.observe(float(server_now), asked, time.monotonic(), *tail[:3])
        self._epoch, self._gen = epoch, max(int(gen), seen)
        if self.journal:
            self.journal.saw(epoch, self._gen)
            self.journal.flush()
        if verdict in ("lost", "replaced", "rollback"):
            self._state_lost(verdict)
        return epoch

    def _state_lost(self, why: str) -> None:
        self.conn._inc("state_lost")
        what = {
            "lost": "came back empty (restarted without persistence, or flushed)",
            "replaced": "holds another fleet's state than this worker last saw (it was emptied)",
            "rollback": "went back in time (restored from an older snapshot)",
        }[why]
        logger.error(
            "Redis at %(url)s %(what)s: no one knows when hosts were last contacted, so every "
            "host waits %(p).0f s before its next request. Run Redis with appendonly yes.",
            {"url": self.conn.url, "what": what, "p": self.pause_on_loss},
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
            self.conn._inc("host_views_forgotten")

    # -- taking and releasing a slot ------------------------------------------------

    async def reserve(self, host: str, now: float, interval: float) -> float:
        owner = f"{self._owner_prefix}-{next(self._seq)}"
        guard = self.conn.guard
        while True:
            epoch = await self._ensure_epoch()
            run, quarantine, lost, clock = guard.keys()
            keys = [
                self._host_key(host), self.conn.key("epoch"), quarantine, self.conn.key("gen"),
                run, lost, clock, self.conn.key("clockq"),
            ]  # fmt: skip
            lossless, _, checked = guard.args()
            args = [
                interval + self.margin, self.lease, epoch, owner, self.pause_on_loss,
                self._gen, self._margins(), lossless, checked, guard.unsure, guard.since,
            ]  # fmt: skip
            asked = time.monotonic()
            status, value, gen, *rest = await self.conn.call(
                "reserve",
                lambda r, keys=keys, args=args: self._reserve(keys=keys, args=args, client=r),
            )
            answered = time.monotonic()
            # rest: the strictest robots.txt interval (3), the guard's
            # {now, run, lost, clock} (4), then the host's adaptive state
            # (7; absent when the state was lost)
            iv, (server_now, *seen), load = rest[:3], rest[3:7], rest[7:]
            stepped = await guard.observe(float(server_now), asked, answered, *seen)
            if status in ("lost", "replaced", "rollback"):
                self._state_lost(status)
                self._epoch, self._gen = value, max(self._gen, int(gen))
                continue
            self._note_load(host, load)
            if status == "wait":
                self._after_answer(epoch, gen, host, iv)
                self._note(host, float(value))
                return float(value)
            try:
                self._after_answer(epoch, gen, host, iv)
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
            if answered - asked > self.lease / 3:
                # The answer took so long that the lease may be nearly over
                # by the time the request could leave: do not use it.
                self.conn._inc("stale_grants")
                await self._release(host, owner)
                continue
            self._grants[host] = (owner, asked + self.lease)
            self._granted_at[host] = float(server_now)
            self._start_renewing()
            self._last[host] = time.monotonic()
            self._note(host, interval)
            return 0.0

    def _after_answer(self, epoch: str, gen: Any, host: str, iv: list[Any]) -> None:
        self._gen = max(self._gen, int(gen))
        if self.journal:
            self.journal.saw(epoch, self._gen)
        self._note_strictest(host, *iv)

    def grant_valid(self, host: str) -> bool:
        """Whether this worker may still send the request it reserved for *host*."""
        grant = self._grants.get(host)
        return grant is None or time.monotonic() < grant[1]

    def _start_renewing(self) -> None:
        if self._renewer is None or not self._renewer.running:
            from scrapy.utils.defer import deferred_from_coro
            from twisted.internet import task

            # deferred_from_coro runs it as an asyncio task, as redis.asyncio needs
            self._renewer = task.LoopingCall(lambda: deferred_from_coro(self._renew_all()))
            self._renewer.start(self.lease / 3, now=False).addErrback(
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
            args = [owner, self.lease, self._granted_at.get(host, 0.0)]
            try:
                ours = await self._renew(keys=keys, args=args)
            except UNAVAILABLE:  # unreachable: the grant runs out on its own
                continue
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
