"""The fleet's guard in Lua: the piece every deciding script of the Redis
backend runs first (:data:`GUARD`: did Redis lose the fleet's history, and
can its clock be trusted?), the check of what it needs from Redis
(:data:`PROBE`), and the guard on its own (:data:`FLEET`). Its Python side is
:class:`~.guard.FleetGuard`; the scripts that run it are in
:mod:`.scripts`.

Plain strings, importable without the ``redis`` extra.
"""

from __future__ import annotations

# -- shared pieces: Redis's clock and the fleet's guard -----------------------

#: how the token of the fleet's record of Redis starts when the records were
#: first made on a Redis without AOF appendfsync always: nothing vouched for
#: what that Redis held before, so a worker holding no blocklist never fails
#: open (see :data:`GUARD`)
UNVOUCHED = "unvouched:"

#: Redis's clock, which every script that reads it starts with (the host
#: clock's PRELUDE builds on it); f() keeps six decimals
NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function f(x) return string.format('%.6f', x) end
"""

#: Can the fleet trust what Redis holds, and the clock it holds it on?
#: Appended to the host clock's ``PRELUDE`` (or :data:`NOW`) by every script
#: that decides (HELLO, RESERVE, FLEET, the target queue's TAKE). Kept apart so a
#: change to a script's own logic merges without touching it.
#:
#: The fleet's record of Redis (the run key) holds ``<run id>|<token>``: the
#: Redis process that last held the fleet's records, and a token made when
#: they were first written. Only the fleet's own records say whether they
#: survived a restart: a lossless restart keeps them (the old run id), a
#: Redis that lost them (a lost volume, FLUSHALL, eviction) has none, or has
#: records another worker made again since (another token). Redis's
#: persistence config says what it *should* keep, not what it kept.
#:
#: A failover keeps the records too (a replica has them) but not always the
#: last writes: replication is asynchronous, and a replica promoted
#: (``REPLICAOF NO ONE``, by Sentinel or a managed service) behind the stream
#: never gets the rest. So every guarded call stamps the fleet's stamp key
#: (replicated) and, with the same mark, this Redis's own copy, written with
#: ``redis.set_repl(redis.REPL_AOF)``: into its own AOF, never to a replica.
#: A Redis whose own copy is not the fleet's latest stamp did not write it:
#: another Redis served the fleet last, and this one may lack its last writes
#: (a replica has only the copy of its last full sync). A restart keeps both
#: (one transaction in one AOF), so a lossless restart stays lossless.
#:
#: Nor is a Redis whose latest stamp is older than a stamp the fleet wrote
#: the Redis that served the fleet since: every stamp's time is at least the
#: time of every answer before it (a hybrid clock: the later of now, the
#: stored stamp's and the caller's latest answer's), so a Redis that holds
#: every acknowledged write holds a stamp no older than any answer a worker
#: got. A worker whose latest answer (or its machine journal's) is later
#: than this Redis's stamp got it from another Redis: the endpoint reaches an
#: old primary again (it failed back before the old primary was made a
#: replica of the new one), or a Redis that went back.
#:
#: Whether a restart was lossless is judged by the persistence in force on
#: the run that ended, not by the config the new run started with (an
#: ``appendfsync everysec`` set at runtime, then a crash, then a start from
#: redis.conf's ``always``): the stamp also says whether every guarded call
#: on its run found AOF with appendfsync always, as its worker last read it
#: (each worker reads it again at every heartbeat).
GUARD = """
-- What a worker saw of the fleet's state when it last looked (`view`, server
-- time, '' if unknown) is gone. Every host waits `pause` from now and the
-- fleet's history is marked incomplete (the lost key: when), unless it was
-- marked since that view: that mark is this loss, whoever saw it first,
-- and its wait runs from then (one mark, one wait, one publication per
-- loss). Returns '1' if it was marked already, else '0'.
local function state_lost(quarantine, lost, pause, view)
  local marked, seen = tonumber(redis.call('GET', lost) or ''), tonumber(view)
  if marked and seen and marked >= seen then return '1' end
  local q = now + tonumber(pause)
  if q > tonumber(redis.call('GET', quarantine) or '0') then redis.call('SET', quarantine, f(q)) end
  redis.call('SET', lost, f(now))
  return '0'
end
-- G = {run key, quarantine key, lost key, clock key, stamp key, own stamp key}
-- A = {lossless ('1': Redis runs AOF with appendfsync always, as this
--      worker last read it), pause s,
--      checked: the server time of this worker's previous answer, found
--      consistent with its monotonic clock ('' if none),
--      seen: the run key as this worker last saw it ('' if never),
--      young s: how long after its start a Redis without the fleet's records
--      may still be one that lost them, token: for records made now,
--      viewed: the server time of this worker's latest answer ('' if none)}
-- Returns {verdict ('' or 'restarted'), run key, lost marker, clock}.
local function guard(G, A)
  local info = redis.call('INFO', 'server')
  local run = string.match(info, 'run_id:(%x+)')
  local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
  local verdict = ''
  -- every host waits until `now + pause` (a request recorded before the
  -- loss is at least that old by then), and the fleet's history is unknown
  -- from now on (the blocklist must not fail open). From now, never from
  -- Redis's start: Redis counts its uptime on its wall clock, which a step
  -- after it started (NTP at boot) makes look an hour long.
  local function lost()
    state_lost(G[2], G[3], A[2], '')
    verdict = 'restarted'
  end
  -- a loss of what this worker saw at its latest answer
  local function lost_since_viewed()
    if state_lost(G[2], G[3], A[2], A[7]) == '0' then verdict = 'restarted' end
  end
  -- no quarantine is set further than `pause` ahead: one that is further
  -- stands on a clock that stepped back since, and is capped (stored once,
  -- as the reservation caps a host's times)
  if tonumber(redis.call('GET', G[2]) or '0') > now + tonumber(A[2]) then
    redis.call('SET', G[2], f(now + tonumber(A[2])))
  end
  local stored = redis.call('GET', G[1])
  local srun, token = string.match(stored or '', '^([^|]*)|?(.*)$')
  local function aof()
    return string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)') == '1'
  end
  local function lossless() return A[1] == '1' and aof() end
  -- the fleet's latest stamp (<run id>@<time>@<'1' if every call on that
  -- run found it lossless>), and this Redis's own copy of the last one it
  -- wrote: kept only where a script may write to the AOF alone
  -- (redis.set_repl: Redis 5 and later, 3.2 with lua-replicate-commands)
  local stamp, own = redis.call('GET', G[5]), redis.call('GET', G[6])
  local stamp_run, stamp_at, stamp_always = string.match(stamp or '', '^(%x*)@([^@]*)@?(.*)$')
  local keeps_own = pcall(redis.set_repl, redis.REPL_ALL)
  -- this worker got an answer later than any stamp here: from another Redis
  local viewed = tonumber(A[7])
  local behind = viewed and (tonumber(stamp_at) or 0) < viewed
  if not stored then
    -- None of the fleet's records: a new fleet, or a Redis that lost them,
    -- whatever its persistence says. This worker saw them: lost (when, it
    -- cannot tell: every host waits from now). A Redis only seconds old may
    -- have lost the records of a fleet whose live workers have not called
    -- yet: lost (young), so they can publish again what they hold.
    -- Older than that, no live worker saw records here (it would have
    -- called, and said so) and no request made before Redis started binds a
    -- host: nothing to wait for, nothing to publish. But without AOF always
    -- nothing vouches for what Redis held before (a snapshot older than an
    -- earlier fleet's records): the token says so, and a worker that holds
    -- no blocklist never fails open (a list that fleet adopted may be lost).
    if A[4] ~= '' or up < tonumber(A[5]) then lost() end
    token = A[6]
    if not lossless() then token = '""" + UNVOUCHED + """' .. token end
    redis.call('SET', G[1], run .. '|' .. token)
  elseif A[4] ~= '' and string.match(A[4], '|(.*)$') ~= token then
    -- the records this worker saw were lost, and made again by another
    -- worker since (which may have taken Redis for a new fleet's, or seen
    -- the loss and marked it: then once is enough)
    lost_since_viewed()
  elseif (keeps_own and stamp and stamp ~= own) or (srun ~= run and not (keeps_own and own)) then
    -- Another Redis wrote the fleet's latest stamp (or this one keeps none
    -- of its own, and cannot vouch for its restart): a replica promoted
    -- since the fleet last looked, which may lack the last writes of the
    -- Redis it replaced. Since when, nothing in it says: every host waits from now.
    -- (Without a copy of its own, only a new run id says so: every restart.)
    redis.call('SET', G[1], run .. '|' .. token)
    lost()
  elseif srun ~= run then
    -- Redis restarted since the fleet last looked, and kept its records.
    -- Only AOF with appendfsync always, in force all along the run that
    -- ended (its last stamp says), keeps every acknowledged write, and only
    -- an AOF loaded brings them back; any other Redis may have come back
    -- older, which nothing in it says.
    redis.call('SET', G[1], run .. '|' .. token)
    if behind or not (stamp_run == srun and stamp_always == '1' and aof()) then lost() end
  elseif behind then
    -- the fleet's latest writes are not here: another Redis served the
    -- fleet since this worker's latest answer (an endpoint that failed back)
    lost_since_viewed()
  end
  -- this call's stamp: the fleet's, and this Redis's own copy (AOF only:
  -- a replica keeps the copy of its last full sync, never a later one);
  -- lossless all along this run only while every call found it so
  local always = A[1]
  if stamp_run == run and stamp_always ~= '1' then always = '0' end
  local at = math.max(now, tonumber(stamp_at) or 0, viewed or 0)
  local mark = run .. '@' .. f(at) .. '@' .. always
  redis.call('SET', G[5], mark)
  if keeps_own then
    redis.set_repl(redis.REPL_AOF)
    redis.call('SET', G[6], mark)
    redis.set_repl(redis.REPL_ALL)
  end
  -- the fleet's clock is good up to the latest time a worker checked against
  -- its own monotonic clock (kept coarse: one write per quarter second at most)
  local checked, clock = tonumber(A[3]), tonumber(redis.call('GET', G[4]) or '0')
  if checked and checked <= now and checked > clock + 0.25 then
    redis.call('SET', G[4], f(checked))
  end
  local lost_at, clock_at = redis.call('GET', G[3]) or '', redis.call('GET', G[4]) or ''
  return {verdict, run .. '|' .. token, lost_at, clock_at}
end
"""


#: What GUARD reads from ``INFO server``, read as it reads it (inside a
#: script), once at a worker's start: {run id, uptime, '1' if a script may
#: write to the AOF alone} ('' for a field INFO does not give). A Redis that
#: refuses INFO (renamed away, an ACL without +info, scripts refused) cannot
#: show the fleet a restart; one without ``redis.set_repl`` keeps no stamp of
#: its own, so the guard counts its every restart as a failover.
PROBE = """
local info = redis.call('INFO', 'server')
local own = pcall(redis.set_repl, redis.REPL_AOF)
if own then redis.set_repl(redis.REPL_ALL) end
return {string.match(info, 'run_id:(%x+)') or '',
        string.match(info, 'uptime_in_seconds:(%d+)') or '', own and '1' or ''}
"""


FLEET = (
    NOW
    + GUARD
    + """
-- The guard alone, for a worker's heartbeat and the blocklist's
-- question "is the fleet's history whole?". With ARGV[8] (a step of Redis's
-- clock this worker measured): hosts last contacted in [ARGV[9], now) wait
-- until ARGV[8] seconds from now, and the clock counts as checked from now.
-- KEYS run, quarantine, lost, clock, stamp, own stamp (GUARD), clock
-- quarantine; ARGV[1..7] lossless, pause, checked, seen, young, token,
-- viewed (GUARD)
local g = guard({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]},
                {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]})
if ARGV[8] ~= '' then
  local u, lo = now + tonumber(ARGV[8]), tonumber(ARGV[9])
  local old = redis.call('GET', KEYS[7])
  if old then
    local ou, olo = string.match(old, '([^|]+)|([^|]+)|')
    u, lo = math.max(u, tonumber(ou)), math.min(lo, tonumber(olo))
  end
  redis.call('SET', KEYS[7], f(u) .. '|' .. f(lo) .. '|' .. f(now))
  redis.call('SET', KEYS[4], f(now))
  g[4] = f(now)
end
return {g[1], f(now), g[2], g[3], g[4]}
"""
)
