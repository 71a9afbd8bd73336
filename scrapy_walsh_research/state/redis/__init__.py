"""The shared backend: politeness state in Redis, one budget for many processes.

With ``WALSH_REDIS_URL`` set, every process on every machine takes each
request's slot from one per-host clock in Redis, and shares the stores
(blocklist, robots copies, validators, cadence, first-seen) and the targets.

* :mod:`.scripts`: every Lua script (run atomically in Redis, on its clock);
  the guard's in :mod:`.guard_scripts`, the per-host hashes' in
  :mod:`.layout_scripts`;
* :mod:`.connection`: one client per crawler, the fail-closed retry loop;
* :mod:`.guard`: the fleet's guard (a Redis restart, a failover, a step of
  its clock);
* :mod:`.store`: the :class:`~scrapy_walsh_research.state.protocols.StateStore`,
  what it keeps per URL or origin in one hash per namespace and host
  (:mod:`.layout`), each forgotten after its retention;
* :mod:`.lock`: single-flight locks (one worker fetches for the fleet);
* :mod:`.journal`: what this worker last saw of the fleet, on disk;
* :mod:`.hostclock`: the :class:`~scrapy_walsh_research.state.protocols.HostClock`;
* :mod:`.target_queue`: the declared targets, shared through a Redis list.

All calls use ``redis.asyncio``: nothing blocks the reactor, which must be
the asyncio one (Scrapy's default). This package's ``__init__`` imports
nothing, so the target queue's list reader needs no ``redis`` extra.
"""
