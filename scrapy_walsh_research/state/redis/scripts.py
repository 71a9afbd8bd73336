"""The Lua scripts of the Redis backend's components: a script is data
(a string sent to Redis, run there atomically), so they live together here,
each with its KEYS and ARGV, and the Python that calls it lives with its
component (:mod:`.hostclock`, :mod:`.lock`, :mod:`.target_queue`). The
fleet's guard, which every deciding script runs first, is in
:mod:`.guard_scripts`; the scripts on the state store's per-host hashes
(the store's writes, R8's cadence claim, and the steps every write to such
a hash takes, ``BUCKETS``), in :mod:`.layout_scripts`.

Plain strings: importing them needs no Redis client, so the target queue's
list reader stays usable without the ``redis`` extra. The SCAN patterns'
escaping is here too, for the same reason.
"""

from __future__ import annotations

import re

from scrapy_walsh_research.state.redis.guard_scripts import GUARD, NOW
from scrapy_walsh_research.state.redis.layout_scripts import BUCKETS


def glob_escape(text: str) -> str:
    """*text* as a literal in a Redis SCAN MATCH pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


# -- the host clock (RedisHostClock) -------------------------------------------------

# Every script reads Redis's clock; f() keeps six decimals, so microseconds
# survive the round trip (Lua's default number format keeps fourteen digits).
PRELUDE = NOW + """
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

# What a host's answers said (scrapy_walsh_research.state.hostload), kept in its
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
-- KEYS[5..7] run, lost, clock (GUARD), KEYS[8] clock quarantine, KEYS[9..10]
-- stamp, own stamp (GUARD);
-- ARGV[8] lossless, ARGV[9] checked, ARGV[10] seconds this worker cannot
-- rule out as a clock step before it joined, for records older than ARGV[11],
-- ARGV[12..15] seen, young, token, viewed (GUARD), ARGV[16] when this
-- worker last saw the epoch and generation it passes (server time).
-- Every answer ends with {now, run, lost, clock} for the worker's guard.
local g = guard({KEYS[5], KEYS[3], KEYS[6], KEYS[7], KEYS[9], KEYS[10]},
                {ARGV[8], ARGV[5], ARGV[9], ARGV[12], ARGV[13], ARGV[14], ARGV[15]})
local function answer(t)
  for _, v in ipairs({f(now), g[2], g[3], g[4]}) do table.insert(t, v) end
  return t
end
local epoch = redis.call('GET', KEYS[2])
local gen = tonumber(redis.call('GET', KEYS[4]) or '0')
if (not epoch) or epoch ~= ARGV[3] or gen < tonumber(ARGV[6]) then
  -- the state is gone or older than what this worker saw: no one knows when
  -- hosts were last contacted. Quarantine every host (unless this loss was
  -- marked already), keep the epoch and generation from going back, and let
  -- the worker log it: {why, epoch, generation, '1' if marked already}.
  local why = 'rollback'
  if not epoch then why = 'lost' elseif epoch ~= ARGV[3] then why = 'replaced' end
  if not epoch then redis.call('SET', KEYS[2], ARGV[3]); epoch = ARGV[3] end
  local marked = state_lost(KEYS[3], KEYS[6], ARGV[5], ARGV[16])
  if gen < tonumber(ARGV[6]) then redis.call('SET', KEYS[4], ARGV[6]) end
  return answer({why, epoch, redis.call('GET', KEYS[4]) or '0', marked, '', '0'})
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
-- A clock stepped back makes stored times look later than they
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
  -- A clock stepped forward makes them look earlier. Hosts last
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
-- KEYS[2] the lost marker, ARGV[3] when the grant was taken (server
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
-- KEYS[4..8] run, lost, clock, stamp, own stamp; ARGV[5..7] lossless, seen,
-- young; ARGV[8] token, ARGV[9] viewed (GUARD); ARGV[10] when the journal's
-- epoch and generation were seen (server time, '' if unknown).
local g = guard({KEYS[4], KEYS[2], KEYS[5], KEYS[6], KEYS[7], KEYS[8]},
                {ARGV[5], ARGV[4], '', ARGV[6], ARGV[7], ARGV[8], ARGV[9]})
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
local marked = '0'
if verdict == 'lost' or verdict == 'replaced' or verdict == 'rollback' then
  marked = state_lost(KEYS[2], KEYS[5], ARGV[4], ARGV[10])
  if gen < tonumber(ARGV[2]) then redis.call('SET', KEYS[3], ARGV[2]); gen = tonumber(ARGV[2]) end
end
return {verdict, epoch, tostring(gen), f(now), g[2], redis.call('GET', KEYS[5]) or '', g[4], g[1],
        marked}
"""
)

# -- single-flight locks (RedisLocks) -------------------------------------------

#: extends a lock's lease if this holder still has it
RENEW_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

#: release a single-flight lock only if this holder still has it: a GET then
#: a DEL could delete the lock another worker took in between
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


# -- the target queue (RedisFeed, finish) ---------------------------------------

#: LMOVE a line into this worker's in-flight list, after giving the lines of
#: workers whose heartbeat ran out back to the head of the queue
TAKE_BODY = """
-- KEYS[1] queue, KEYS[2] worker registry, KEYS[3] this worker's in-flight list
-- ARGV[1] the feed's key prefix, ARGV[2] this worker's id, ARGV[3] heartbeat prefix
-- KEYS[4..9] run, quarantine, lost, clock, stamp, own stamp and ARGV[4..10]
-- lossless, pause, checked, seen, young, token, viewed (GUARD). Answers
-- {line or false, lines in flight elsewhere, seconds to wait before asking
-- again, now, run, lost, clock}.
local g = guard({KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]},
                {ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]})
local function answer(raw, pending, wait)
  return {raw, pending, f(wait), f(now), g[2], g[3], g[4]}
end
-- While the fleet's history is being recovered (the quarantine after Redis
-- lost or rolled back data), no line is handed out: the workers that wrote
-- records since publish them again first, and no host can be contacted anyway.
local q = tonumber(redis.call('GET', KEYS[5]) or '0')
if q > now then return answer(false, 0, q - now) end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if id ~= ARGV[2] and redis.call('EXISTS', ARGV[3] .. id) == 0 then
    local lost = ARGV[1] .. 'inflight:' .. id
    local items = redis.call('LRANGE', lost, 0, -1)
    for i = #items, 1, -1 do redis.call('LPUSH', KEYS[1], items[i]) end
    redis.call('DEL', lost)
    redis.call('SREM', KEYS[2], id)
  end
end
redis.call('SADD', KEYS[2], ARGV[2])
-- a line that has its record already (the queue came back from an older
-- snapshot, and the record was published again) is acknowledged, not taken
for _ = 1, 100 do
  local raw = redis.call('LMOVE', KEYS[1], KEYS[3], 'LEFT', 'RIGHT')
  if not raw then break end
  local ok, item = pcall(cjson.decode, raw)
  local recorded = 0
  if ok and type(item) == 'table' and item.line and item.batch then
    recorded = redis.call('HEXISTS', ARGV[1] .. 'records:' .. tostring(item.batch),
                          tostring(item.line))
  end
  if recorded == 0 then return answer(raw, 0, 0) end
  redis.call('LREM', KEYS[3], -1, raw)
end
if redis.call('LLEN', KEYS[1]) > 0 then return answer(false, 0, 0.001) end
-- nothing queued: are lines still in flight somewhere (their worker may die)?
local pending = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if id ~= ARGV[2] then pending = pending + redis.call('LLEN', ARGV[1] .. 'inflight:' .. id) end
end
return answer(false, pending, 0)
"""
TAKE = NOW + GUARD + TAKE_BODY

#: a worker stopped gracefully gives the lines it holds without a record back
#: to the head of the queue, in their order, in one step (as TAKE gives back a
#: dead worker's): the fleet takes them at once, not after its heartbeat lapses
GIVE_BACK = """
-- KEYS[1] this worker's in-flight list, KEYS[2] the queue
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i = #items, 1, -1 do redis.call('LPUSH', KEYS[2], items[i]) end
redis.call('DEL', KEYS[1])
return #items
"""

#: claim a canonical URL for a line and keep the claims a week, in one step:
#: a worker killed (or a connection lost) between the two would leave a
#: batch's claims without an expiry, kept forever
CLAIM = """
-- KEYS[1] the batch's claims, ARGV[1] canonical URL, ARGV[2] line, ARGV[3] TTL
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""

#: a record into its host's index (a sorted set, scored by when each member
#: was written or last found alive): a member stays while its record does.
#: Each record written looks at a few members dated *ttl* ago or more: one
#: whose record is gone goes, one whose batch is still kept is dated now.
#: (An index of the layout before, a set, becomes a sorted set dated now.)
INDEX = """
local function index_record(key, member, ttl)
  if redis.call('TYPE', key).ok == 'set' then
    local old = redis.call('SMEMBERS', key)
    redis.call('DEL', key)
    for i = 1, #old do redis.call('ZADD', key, now, old[i]) end
  end
  redis.call('ZADD', key, now, member)
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', string.format('%.6f', now - ttl),
                         'LIMIT', 0, 8)
  for _, m in ipairs(due) do
    local ok, entry = pcall(cjson.decode, m)
    if ok and type(entry) == 'table' and type(entry[1]) == 'string' and entry[3]
       and redis.call('HEXISTS', entry[1], tostring(entry[3])) == 1 then
      redis.call('ZADD', key, now, m)
    else
      redis.call('ZREM', key, m)
    end
  end
  redis.call('EXPIRE', key, math.ceil(ttl))
end
"""

#: publishing a record again (RecordCopies.republish): first record wins
REPUBLISH = NOW + INDEX + """
-- KEYS[1] records of the batch, KEYS[2] the host's record index, KEYS[3] the
-- in-flight list the line came back to; ARGV[1] line, ARGV[2] record, ARGV[3]
-- records TTL, ARGV[4] its member in the index ('' for no host), ARGV[5] the
-- line as queued ('' if unknown)
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])))
if ARGV[4] ~= '' then index_record(KEYS[2], ARGV[4], tonumber(ARGV[3])) end
if ARGV[5] ~= '' then redis.call('LREM', KEYS[3], 1, ARGV[5]) end
return 1
"""

#: one record per line, the line acknowledged and its cadence written, in one step
FINISH = NOW + BUCKETS + INDEX + """
-- KEYS[1] records of the batch, KEYS[2] the in-flight list the line is in,
-- KEYS[3] the host's cadence hash, KEYS[4] its cadence claims hash
-- ARGV[1] line, ARGV[2] record (JSON), ARGV[3] the line as queued,
-- ARGV[4] the target's field ('' when the line was not fetched), ARGV[5] records TTL,
-- ARGV[6] the claim's field ('' if none), ARGV[7] worker id
-- KEYS[5] the host's record index, ARGV[8] this record in it ('' for no host)
-- KEYS[6] the legacy cadence hash, ARGV[9] the target (its legacy key),
-- ARGV[10] the cadence's retention s, ARGV[11] how long ago the answer came
-- (s): the cadence is stamped then, and returned
local at = now - math.max(0, tonumber(ARGV[11] or '0') or 0)
local first = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[5])))
if ARGV[8] ~= '' then index_record(KEYS[5], ARGV[8], tonumber(ARGV[5])) end
redis.call('LREM', KEYS[2], 1, ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[4], stamp(string.format('%.6f', at)))
  redis.call('HDEL', KEYS[6], ARGV[9])
  touch(KEYS[3], tonumber(ARGV[10]))
end
if ARGV[6] ~= '' and unstamp(redis.call('HGET', KEYS[4], ARGV[6])) == ARGV[7] then
  redis.call('HDEL', KEYS[4], ARGV[6])
end
return {first, string.format('%.6f', at)}
"""


# -- the audit log's window in Redis (evidence.audit_redis) -------------------------

#: drop from the hosts' index the hosts whose stream has expired, checking
#: and removing in one step: a worker's first entry for a host landing
#: between the two must not lose the host from the index
AUDIT_FORGET_HOSTS = """
-- KEYS[1] the hosts' index; ARGV pairs: a member (reversed host), its stream
local removed = 0
for i = 1, #ARGV, 2 do
  if redis.call('EXISTS', ARGV[i + 1]) == 0 then
    redis.call('ZREM', KEYS[1], ARGV[i])
    removed = removed + 1
  end
end
return removed
"""
