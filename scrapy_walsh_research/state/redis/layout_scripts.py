"""The Lua of the state store's per-host hashes (:mod:`.layout`): how a
write stamps a value, refreshes its hash's expiry and compacts it
(``BUCKETS``, which a line's FINISH in :mod:`.scripts` runs too), the
store's own writes, and R8's claim on a target and its release (the
fleet's cadence store, :mod:`scrapy_walsh_research.state.redis.cadence`,
calls them). Kept apart from
:mod:`.scripts` as the guard's are (:mod:`.guard_scripts`), for the same
reasons: plain strings, no Redis client needed to import them.
"""

from __future__ import annotations

from scrapy_walsh_research.state.redis.guard_scripts import NOW

#: Every value of a per-host hash is ``<unix seconds> <value>``: when it was
#: written. Each write refreshes the hash's expiry (``touch``: an idle host's
#: hash goes as a whole) and takes one step of its compaction, which drops
#: the entries written *retention* seconds ago or more (readers ignore them
#: meanwhile). A compaction starts once the hash has grown by half since the
#: last one ended (or has SMALL fields), and HSCANs STEP fields per write
#: until it comes round: each write does a bounded amount of work, the work
#: is paid for by the writes that grew the hash (three fields looked at per
#: field added), and a hash holds at most about half again the entries
#: written within the retention (or SMALL). Its progress is the
#: field '#' (``<fields after the last one> <cursor>``).
BUCKETS = """
local MARK, SMALL, STEP = '#', 64, 64
local function unstamp(v)
  if not v then return nil, nil end
  local s, rest = string.match(v, '^(%d+) (.*)$')
  if s then return rest, tonumber(s) end
  return v, nil
end
local function stamp(value) return string.format('%d ', math.floor(now)) .. value end
local function compact(key, ttl)
  local mark = redis.call('HGET', key, MARK)
  local size, cursor = 0, '0'
  if mark then
    local a, b = string.match(mark, '^(%d+) (%d+)$')
    if a then size, cursor = tonumber(a), b end
  end
  if cursor == '0' and redis.call('HLEN', key) < math.max(size + math.floor(size / 2), SMALL) then
    return
  end
  local res = redis.call('HSCAN', key, cursor, 'COUNT', STEP)
  local items, cutoff = res[2], now - ttl
  for i = 1, #items, 2 do
    if items[i] ~= MARK then
      local s = tonumber(string.match(items[i + 1], '^(%d+) '))
      if s and s <= cutoff then redis.call('HDEL', key, items[i]) end
    end
  end
  if res[1] == '0' then size = redis.call('HLEN', key) end
  redis.call('HSET', key, MARK, string.format('%d ', size) .. res[1])
end
local function touch(key, ttl)
  redis.call('EXPIRE', key, math.ceil(ttl) + 1)
  compact(key, ttl)
end
local function hdel_all(key, fields)
  for i = 1, #fields, 1000 do
    redis.call('HDEL', key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end
"""

#: put / put_many: every value stamped, its legacy copy gone, each hash touched
PUT = NOW + BUCKETS + """
-- KEYS: the per-host hashes written, then the namespace's legacy hash (last)
-- ARGV[1] retention s; then per hash: the number n of its entries, and n
-- triples (field, the key in the legacy hash, value)
local ttl, legacy, at, old = tonumber(ARGV[1]), KEYS[#KEYS], 2, {}
for k = 1, #KEYS - 1 do
  local n = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, n do
    redis.call('HSET', KEYS[k], ARGV[at], stamp(ARGV[at + 2]))
    table.insert(old, ARGV[at + 1])
    at = at + 3
  end
  touch(KEYS[k], ttl)
end
hdel_all(legacy, old)
return #old
"""

#: put_if_absent: the stored value (a legacy one is moved), else *value*, stored
PUT_IF_ABSENT = NOW + BUCKETS + """
-- KEYS[1] the per-host hash, KEYS[2] the legacy hash
-- ARGV[1] retention s, ARGV[2] field, ARGV[3] legacy key, ARGV[4] value
local ttl = tonumber(ARGV[1])
local value, at = unstamp(redis.call('HGET', KEYS[1], ARGV[2]))
if value and (not at or at > now - ttl) then return value end
value = redis.call('HGET', KEYS[2], ARGV[3]) or ARGV[4]
redis.call('HSET', KEYS[1], ARGV[2], stamp(value))
redis.call('HDEL', KEYS[2], ARGV[3])
touch(KEYS[1], ttl)
return value
"""

#: the upgrade: legacy entries into their hosts' hashes, unless one is there
MIGRATE = NOW + BUCKETS + """
-- KEYS: the per-host hashes, then the legacy hash (last)
-- ARGV[1] retention s; then per hash: n, and n pairs (field, legacy key)
local ttl, legacy, at, moved = tonumber(ARGV[1]), KEYS[#KEYS], 2, 0
for k = 1, #KEYS - 1 do
  local n = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, n do
    local value = redis.call('HGET', legacy, ARGV[at + 1])
    if value then
      if redis.call('HSETNX', KEYS[k], ARGV[at], stamp(value)) == 1 then moved = moved + 1 end
      redis.call('HDEL', legacy, ARGV[at + 1])
    end
    at = at + 2
  end
  touch(KEYS[k], ttl)
end
return moved
"""


# -- R8 cadence (state.redis.cadence) ------------------------------------------------

#: only one worker of a fleet fetches a target at a time: same URL, other batch
CADENCE_CLAIM = NOW + BUCKETS + """
-- KEYS[1] the host's cadence hash, KEYS[2] its claims hash, KEYS[3], KEYS[4]
-- the legacy cadence and claims hashes
-- ARGV[1] the target's field, ARGV[2] interval s, ARGV[3] worker id,
-- ARGV[4] heartbeat prefix, ARGV[5] the target (its legacy key), ARGV[6]
-- the claims' retention s
local value = unstamp(redis.call('HGET', KEYS[1], ARGV[1]))
local last = tonumber(value or redis.call('HGET', KEYS[3], ARGV[5]) or '')
if last and now - last < tonumber(ARGV[2]) and last <= now then
  return {'recent', string.format('%.6f', last)}
end
local owner = unstamp(redis.call('HGET', KEYS[2], ARGV[1])) or redis.call('HGET', KEYS[4], ARGV[5])
if owner and owner ~= ARGV[3] and redis.call('EXISTS', ARGV[4] .. owner) == 1 then
  return {'taken', owner}
end
redis.call('HSET', KEYS[2], ARGV[1], stamp(ARGV[3]))
touch(KEYS[2], tonumber(ARGV[6]))
return {'ok', ''}
"""

#: a claim goes, if it is still this worker's
RELEASE_CLAIM = """
-- KEYS[1] the host's claims hash; ARGV[1] the target's field, ARGV[2] worker id
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and (v == ARGV[2] or string.match(v, '^%d+ (.*)$') == ARGV[2]) then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""
