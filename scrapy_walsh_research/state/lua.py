"""Lua shared by the Redis scripts of :mod:`~scrapy_walsh_research.state.redis`
and :mod:`~scrapy_walsh_research.state.target_queue`. Plain strings: importing
them needs no Redis client, so the feed's list reader stays usable without
the extra."""

from __future__ import annotations

#: Redis's clock, for a script that does not start with the host clock's
#: PRELUDE (the feed's); f() keeps six decimals
NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function f(x) return string.format('%.6f', x) end
"""

#: The recovery guard: can the fleet trust what Redis holds, and the clock it holds it on?
#: Appended to the host clock's ``PRELUDE`` (or :data:`NOW`) by every script
#: that decides (HELLO, RESERVE, FLEET, the feed's TAKE). Kept apart so a
#: change to a script's own logic merges without touching it.
GUARD = """
-- G = {run key, quarantine key, lost key, clock key}
-- A = {lossless ('1': Redis runs AOF with appendfsync always), pause s,
--      checked: the server time of this worker's previous answer, found
--      consistent with its monotonic clock ('' if none)}
-- Returns {verdict ('' or 'restarted'), run id, lost marker, clock}.
local function guard(G, A)
  local info = redis.call('INFO', 'server')
  local run = string.match(info, 'run_id:(%x+)')
  local verdict = ''
  if redis.call('GET', G[1]) ~= run then
    -- Redis restarted since the fleet last looked (or the prefix is new).
    -- Only AOF with appendfsync always keeps every acknowledged write; any
    -- other Redis may have come back empty or older, which nothing in it
    -- says. Every host waits until `pause` after Redis started (a request
    -- before the restart is at least that old by then), and the fleet's
    -- history is unknown from now on (the blocklist must not fail open).
    redis.call('SET', G[1], run)
    local aof = string.match(redis.call('INFO', 'persistence'), 'aof_enabled:(%d)')
    if not (A[1] == '1' and aof == '1') then
      local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)'))
      local q = now - up + tonumber(A[2])
      if q > tonumber(redis.call('GET', G[2]) or '0') then redis.call('SET', G[2], f(q)) end
      redis.call('SET', G[3], f(now))
      verdict = 'restarted'
    end
  end
  -- the fleet's clock is good up to the latest time a worker checked against
  -- its own monotonic clock (kept coarse: one write per quarter second at most)
  local checked, clock = tonumber(A[3]), tonumber(redis.call('GET', G[4]) or '0')
  if checked and checked <= now and checked > clock + 0.25 then
    redis.call('SET', G[4], f(checked))
  end
  return {verdict, run, redis.call('GET', G[3]) or '', redis.call('GET', G[4]) or ''}
end
"""
