"""The shared :class:`~scrapy_walsh_research.state.protocols.StateStore`:
the stores (blocklist, robots copies, validators, cadence, first-seen) in
Redis, for every worker of the fleet.

What is stored per URL or origin is kept per host and forgotten after its
namespace's retention (:mod:`.layout`): Redis's memory holds what a crawl
of the last ``WALSH_STATE_TTL`` needs, however long the fleet runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.state.namespaces import BY_HOST, key_host, key_prefixes
from scrapy_walsh_research.state.protocols import FlightBusy
from scrapy_walsh_research.state.redis import layout
from scrapy_walsh_research.state.redis.connection import RedisConnection
from scrapy_walsh_research.state.redis.layout_scripts import MIGRATE, PUT, PUT_IF_ABSENT
from scrapy_walsh_research.state.redis.lock import RedisLocks
from scrapy_walsh_research.state.redis.scripts import glob_escape
from scrapy_walsh_research.state.redis.target_queue import purge_records

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from redis import asyncio as aioredis
    from redis.typing import EncodableT, FieldT

logger = logging.getLogger(__name__)

#: entries per script call when many are written, moved or deleted at once
CHUNK = 500


class RedisStateStore:
    """The :class:`~scrapy_walsh_research.state.protocols.StateStore` in Redis:
    values as JSON; what is stored per URL or origin in one hash per
    namespace and host, each value stamped with when it was written
    (:mod:`.layout`), the rest in one hash per namespace. A write returns
    once Redis has it; durability beyond that is Redis's persistence (run it
    with AOF)."""

    #: every worker of the fleet reads and writes it
    shared = True

    def __init__(self, conn: RedisConnection, ttls: dict[str, float] | None = None) -> None:
        self.conn = conn
        self.locks = RedisLocks(conn)
        #: seconds each per-host namespace keeps an entry (namespaces.retention)
        self.ttls = ttls if ttls is not None else layout.retention_of(conn)
        self._put = conn.client.register_script(PUT)
        self._put_if_absent = conn.client.register_script(PUT_IF_ABSENT)
        self._migrate = conn.client.register_script(MIGRATE)
        self._upgrading: asyncio.Task[None] | None = None

    # -- the layout ------------------------------------------------------------------

    def _hash(self, namespace: str) -> str:
        """A namespace kept whole (the blocklist, the secret); for a per-host
        one, its legacy hash."""
        return layout.legacy(self.conn, namespace)

    def _bucket(self, namespace: str, host: str) -> str:
        return layout.bucket(self.conn, namespace, host)

    def _by_bucket(self, namespace: str, keys: Iterable[str]) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            grouped[self._bucket(namespace, layout.bucket_host(key))].append(key)
        return grouped

    def _fresh(self, namespace: str, raw: str | None) -> str | None:
        """A stored value as JSON, or None when it is missing or older than
        the namespace keeps it (its hash's compaction has not reached it)."""
        if raw is None:
            return None
        at, value = layout.unstamped(raw)
        if at is not None and self.conn.time() - at >= self.ttls[namespace]:
            return None
        return value

    # -- the interface -----------------------------------------------------------------

    async def get(self, namespace: str, key: str) -> Any | None:
        if not layout.sharded(namespace):
            raw = await self.conn.call(
                f"get {namespace}", lambda r: r.hget(self._hash(namespace), key)
            )
            return json.loads(raw) if raw is not None else None
        return (await self.get_many(namespace, [key])).get(key)

    async def put(self, namespace: str, key: str, value: Any) -> None:
        await self.put_many(namespace, {key: value})

    async def get_many(self, namespace: str, keys: list[str]) -> dict[str, Any]:
        if not keys:
            return {}
        if not layout.sharded(namespace):
            raws = await self.conn.call(
                f"get {namespace}", lambda r: r.hmget(self._hash(namespace), keys)
            )
            return {k: json.loads(v) for k, v in zip(keys, raws, strict=True) if v is not None}
        self._upgrade_soon()
        grouped = self._by_bucket(namespace, keys)

        async def read(r: aioredis.Redis) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for name, some in grouped.items():
                pipe.hmget(name, [layout.field(k) for k in some])
            pipe.hmget(self._hash(namespace), keys)  # what the layout before holds
            return list(await pipe.execute())

        *found, old = await self.conn.call(f"get {namespace}", read)
        out: dict[str, Any] = {}
        for some, raws in zip(grouped.values(), found, strict=True):
            for key, raw in zip(some, raws, strict=True):
                value = self._fresh(namespace, raw)
                if value is not None:
                    out[key] = json.loads(value)
        for key, raw in zip(keys, old, strict=True):
            if key not in out and raw is not None:
                out[key] = json.loads(raw)
        return out

    async def put_many(self, namespace: str, values: dict[str, Any]) -> None:
        if not values:
            return
        data = {k: json.dumps(v, sort_keys=True) for k, v in values.items()}
        if not layout.sharded(namespace):
            mapping: dict[FieldT, EncodableT] = dict(data.items())
            # one HSET: all fields or none
            await self.conn.call(
                f"put {namespace}", lambda r: r.hset(self._hash(namespace), mapping=mapping)
            )
            return
        self._upgrade_soon()
        grouped = self._by_bucket(namespace, data)
        keys = [*grouped, self._hash(namespace)]
        args: list[Any] = [self.ttls[namespace]]
        for some in grouped.values():
            args.append(len(some))
            for key in some:
                args += [layout.field(key), key, data[key]]
        # one script: all or nothing
        await self.conn.call(
            f"put {namespace}", lambda r: self._put(keys=keys, args=args, client=r)
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
        if not layout.sharded(namespace):
            name = self._hash(namespace)

            async def put(r: aioredis.Redis) -> str:
                await r.hsetnx(name, key, data)
                # a str (decode_responses), the one just written or the first one
                return str(await r.hget(name, key))

            return json.loads(await self.conn.call(f"put {namespace}", put))
        keys = [self._bucket(namespace, layout.bucket_host(key)), self._hash(namespace)]
        args: list[Any] = [self.ttls[namespace], layout.field(key), key, data]
        stored = await self.conn.call(
            f"put {namespace}", lambda r: self._put_if_absent(keys=keys, args=args, client=r)
        )
        return json.loads(stored)

    async def delete(self, namespace: str, key: str) -> None:
        await self.delete_many(namespace, [key])

    async def keys(self, namespace: str, prefix: str = "") -> list[str]:
        if not layout.sharded(namespace):
            pattern = glob_escape(prefix) + "*"

            async def scan(r: aioredis.Redis) -> list[str]:
                # HSCAN (not HKEYS): a large hash is read in steps, not in one
                # blocking call; NOVALUES needs Redis 7.4, so values come too
                return [
                    k
                    async for k, _ in r.hscan_iter(self._hash(namespace), match=pattern, count=1000)
                ]

            return await self.conn.call(f"keys {namespace}", scan)
        found = await self._entries(namespace, None)
        return sorted(k for k, raw in found.items() if k.startswith(prefix) and raw is not None)

    async def _entries(self, namespace: str, host: str | None) -> dict[str, str | None]:
        """Every key of a per-host *namespace* (of *host* only, if given), with
        its value as JSON (None: older than the namespace keeps it). Not on a
        hot path: without *host*, every hash of the namespace is read."""
        base = self._bucket(namespace, "")

        async def scan(r: aioredis.Redis) -> dict[str, str | None]:
            out: dict[str, str | None] = {}
            if host is None:
                names = [n async for n in r.scan_iter(match=glob_escape(base) + "*", count=1000)]
            else:
                names = [self._bucket(namespace, host)]
            for name in names:
                owner = name[len(base) :]
                async for name_field, raw in r.hscan_iter(name, count=1000):
                    key = layout.key_of(name_field, owner)
                    if key is not None:
                        out[key] = self._fresh(namespace, raw)
            old = self._hash(namespace)
            patterns = ["*"] if host is None else [glob_escape(p) + "*" for p in key_prefixes(host)]
            for pattern in patterns:
                async for key, raw in r.hscan_iter(old, match=pattern, count=1000):
                    if host is None or key_host(key) == host:
                        out.setdefault(key, raw)
            return out

        return await self.conn.call(f"keys {namespace}", scan)

    async def delete_many(self, namespace: str, keys: list[str]) -> None:
        if not layout.sharded(namespace):
            for i in range(0, len(keys), CHUNK):
                chunk = keys[i : i + CHUNK]

                async def drop(r: aioredis.Redis, c: list[str] = chunk) -> int:
                    return await r.hdel(self._hash(namespace), *c)

                await self.conn.call(f"delete {namespace}", drop)
            return
        for i in range(0, len(keys), CHUNK):
            grouped = self._by_bucket(namespace, keys[i : i + CHUNK])
            old = keys[i : i + CHUNK]

            async def drop_all(
                r: aioredis.Redis, grouped: dict[str, list[str]] = grouped, old: list[str] = old
            ) -> None:
                pipe = r.pipeline(transaction=True)  # one transaction
                for name, some in grouped.items():
                    pipe.hdel(name, *[layout.field(k) for k in some])
                pipe.hdel(self._hash(namespace), *old)
                await pipe.execute()

            await self.conn.call(f"delete {namespace}", drop_all)

    async def hosts(self, namespace: str) -> list[str]:
        """The hosts *namespace* holds entries about (a purge's candidates)."""
        if not layout.sharded(namespace):
            found = await self.keys(namespace)
            return sorted({h for k in found if (h := key_host(k)) is not None})
        base = self._bucket(namespace, "")
        old = self._hash(namespace)

        async def scan(r: aioredis.Redis) -> set[str]:
            out = {n[len(base) :] async for n in r.scan_iter(match=glob_escape(base) + "*")}
            async for key, _ in r.hscan_iter(old, count=1000):
                out.add(key_host(key) or "")
            return out

        return sorted(h for h in await self.conn.call(f"hosts {namespace}", scan) if h)

    async def forget(self, namespace: str, host: str) -> int:
        """Delete every entry of *namespace* about *host*: how many there were."""
        if not layout.sharded(namespace):
            gone = [k for k in await self.keys(namespace) if key_host(k) == host]
            await self.delete_many(namespace, gone)
            return len(gone)
        name = self._bucket(namespace, host)
        old = list(await self._entries(namespace, host))

        async def drop(r: aioredis.Redis) -> None:
            pipe = r.pipeline(transaction=True)
            pipe.delete(name)
            for i in range(0, len(old), CHUNK):
                pipe.hdel(self._hash(namespace), *old[i : i + CHUNK])
            await pipe.execute()

        await self.conn.call(f"forget {namespace}", drop)
        return len(old)

    # -- the layout before this one ------------------------------------------------------

    def _upgrade_soon(self) -> None:
        """Move what the layout before holds, in the background, once per
        process (reads find it meanwhile)."""
        if self._upgrading is None:
            self._upgrading = asyncio.ensure_future(self._upgrade_quietly())

    async def _upgrade_quietly(self) -> None:
        try:
            await self.upgrade()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the old entries are still read: nothing is lost
            logger.error("Moving stored state into its per-host layout failed: %(e)s", {"e": exc})

    async def upgrade(self) -> int:
        """Move every entry of a per-host namespace still in its legacy hash
        (the layout of 0.4 and before, one hash per namespace, never
        expiring) into its host's hash, dated now, unless one is there; the
        legacy hash empties and goes. One worker at a time; returns the
        entries moved."""
        present = await self.conn.call(
            "find legacy state",
            lambda r: r.exists(*[self._hash(ns) for ns in BY_HOST]),
        )
        if not present:
            return 0
        try:
            release = await self.locks.single_flight("state-layout", ttl=3600.0, max_wait=0.0)
        except FlightBusy:
            return 0  # another worker moves them
        if release is None:
            return 0
        moved = 0
        try:
            for namespace in BY_HOST:
                moved += await self._move(namespace)
        finally:
            await release()
        if moved:
            logger.info(
                "Moved %(n)d stored entries into the per-host layout (each kept "
                "WALSH_STATE_TTL from now)",
                {"n": moved},
            )
        return moved

    async def _move(self, namespace: str) -> int:
        old = self._hash(namespace)
        moved, cursor = 0, 0

        async def read(r: aioredis.Redis) -> tuple[int, dict[str, str]]:
            found: Any = await r.hscan(old, cursor, count=CHUNK)
            return int(found[0]), dict(found[1])

        while True:
            cursor, chunk = await self.conn.call("read legacy state", read)
            if chunk:
                grouped = self._by_bucket(namespace, chunk)
                keys = [*grouped, old]
                args: list[Any] = [self.ttls[namespace]]
                for some in grouped.values():
                    args.append(len(some))
                    for key in some:
                        args += [layout.field(key), key]

                async def move(r: aioredis.Redis, k: list[str] = keys, a: list[Any] = args) -> int:
                    return int(await self._migrate(keys=k, args=a, client=r))

                moved += await self.conn.call("move legacy state", move)
            if cursor == 0 and not await self.conn.call(
                "read legacy state", lambda r: r.exists(old)
            ):
                return moved

    # -- the rest ------------------------------------------------------------------------

    async def history_complete(self) -> bool:
        return await self.conn.guard.history_complete()

    def on_history_lost(self, callback: Callable[[], Awaitable[None]]) -> None:
        self.conn.guard.on_history_lost(callback)

    def time(self) -> float:
        return self.conn.time()

    async def single_flight(
        self, name: str, ttl: float, max_wait: float | None = None
    ) -> Callable[[], Awaitable[None]] | None:
        return await self.locks.single_flight(name, ttl, max_wait)

    async def purge_records(
        self,
        matches: Callable[[str], bool],
        cause: Callable[[str], str],
        now: str,
        host: str | None = None,
    ) -> dict[str, dict[str, int]]:
        return await purge_records(self.conn, matches, cause, now, host)

    async def close(self) -> None:
        if self._upgrading is not None and not self._upgrading.done():
            # not awaited: close may run outside the asyncio loop's own tasks;
            # what was not moved yet is moved by the next worker to start
            self._upgrading.cancel()
        await self.conn.close()
