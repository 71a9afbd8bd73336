"""Targets fed through Redis: any number of workers share one declared list.

``scrapy walsh-enqueue urls.txt`` pushes every line of a list onto a Redis
list (``WALSH_REDIS_TARGETS_KEY``); each worker running
``scrapy crawl targets -a redis_key=...`` pops lines one at a time, so a line
is fetched by exactly one worker and the work spreads by itself. Scrapy pulls
start requests only while its download slot is free, so a worker never
hoards lines the others could be fetching.

Lines keep their number in the list, and canonical-URL dedup is shared
within one enqueued list (a *batch*): the first worker to claim a canonical
URL fetches it, the others record a duplicate naming the line that won. The
same list enqueued again tomorrow is a new batch, fetched again (R8 cadence
decides, not the dedup).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from scrapy_walsh_research.core.target_list import read_list
from scrapy_walsh_research.core.urls import is_http_url, url_host
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.namespaces import CADENCE, CADENCE_CLAIMS
from scrapy_walsh_research.state.redis import layout
from scrapy_walsh_research.state.redis.client import client_options
from scrapy_walsh_research.state.redis.scripts import (
    CLAIM,
    FINISH,
    GIVE_BACK,
    REPUBLISH,
    TAKE,
    glob_escape,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from scrapy_walsh_research.state.redis.connection import RedisConnection

logger = logging.getLogger(__name__)


def enqueue(
    url: str,
    key: str,
    path: Path,
    *,
    prefix: str = defaults.WALSH_REDIS_PREFIX,
    batch: str | None = None,
) -> int:
    """Push the list at *path* onto the Redis list *key*; returns the lines pushed.

    Synchronous on purpose: it runs from a command, with no reactor to block.
    """
    import redis  # here: Scrapy imports walsh-enqueue, so this module, on every command

    client = redis.Redis.from_url(url, **client_options())
    batch = batch or uuid.uuid4().hex
    items = [
        json.dumps(
            {"line": line.number, "url": line.text, "list": str(path), "batch": batch}
            # an invalid line travels with its reason: its worker records it
            | ({"invalid": line.invalid} if line.invalid else {})
        )
        for line in read_list(path)
    ]
    try:
        for i in range(0, len(items), 1000):
            client.rpush(f"{prefix}:{key}", *items[i : i + 1000])
    finally:
        client.close()
    return len(items)


class RedisFeed:
    """A worker's view of the shared list: take the next line, claim a URL,
    finish a line.

    Delivery is at least once, acknowledged after the record: a line taken
    moves to this worker's in-flight list and leaves it only with its record
    (:func:`finish`), written to ``<key>:records:<batch>`` once per line
    whoever writes first. A worker that dies (its heartbeat runs out) gives
    its in-flight lines back to the queue the next time any worker takes a
    line; a worker that finds the queue empty waits while other workers
    still hold lines in flight, so a line is never left behind.
    """

    def __init__(self, conn: RedisConnection, key: str) -> None:
        self.conn = conn
        self.key = key
        self.queue = conn.key(key)
        self.base = conn.key(key) + ":"
        self.inflight = self.base + "inflight:" + conn.worker
        self._take = conn.client.register_script(TAKE)
        self._claim = conn.client.register_script(CLAIM)

    async def take(self) -> tuple[str | None, int, float]:
        """(the next line as queued, or None; lines other workers hold in
        flight; seconds to wait before asking again: the fleet is recovering
        history Redis lost)."""
        await self.conn.announce()
        guard = self.conn.guard
        await guard.prepare()
        keys = [self.queue, self.base + "workers", self.inflight, *guard.keys()]
        args = [self.base, self.conn.worker, self.conn.key("alive", ""), *guard.args()]
        asked = time.monotonic()
        raw, pending, wait, *seen = await self.conn.call(
            "take target", lambda r: self._take(keys=keys, args=args, client=r)
        )
        now, *tail = seen
        await guard.observe(float(now), asked, time.monotonic(), *tail)
        return raw or None, int(pending), float(wait)

    async def give_back(self) -> int:
        """Put the lines this worker took and holds without a record back at
        the head of the queue (a graceful stop); how many went back."""
        script = self.conn.client.register_script(GIVE_BACK)
        keys = [self.inflight, self.queue]
        back = await self.conn.call("give lines back", lambda r: script(keys=keys, client=r))
        return int(back)

    async def drop(self, raw: str) -> None:
        """Acknowledge a queued item that is no line at all (logged by the caller)."""
        await self.conn.call("drop item", lambda r: r.lrem(self.inflight, 1, raw))

    def ticket(self, raw: str, batch: str) -> dict[str, str]:
        """What the record of this line needs to acknowledge it (kept in the
        request's meta, so another worker can finish it under scrapy-redis)."""
        return {
            "raw": raw,
            "inflight": self.inflight,
            "records": self.base + "records:" + batch,
            "claims": self.conn.key(self.key, "canonical", batch),
        }

    async def claim(self, batch: str, canonical: str, line: int) -> int | None:
        """None if this line is first with *canonical* in *batch* (also when it
        is delivered again after its worker died), else the line that was."""
        keys = [self.conn.key(self.key, "canonical", batch)]
        # kept as long as the batch's records, from its last claim
        args: list[str | float] = [canonical, line, _seconds(layout.records_ttl(self.conn))]
        first = int(
            await self.conn.call(
                "claim target", lambda r: self._claim(keys=keys, args=args, client=r)
            )
        )
        return None if first == line else first


async def finish(
    conn: RedisConnection,
    ticket: dict[str, str],
    record: dict[str, Any],
    cadence_key: str,
    claim_key: str,
    age: float = 0.0,
) -> tuple[bool, float]:
    """Write *record* as its line's one record, acknowledge the line and
    write its cadence (Redis's time, less *age*: how long ago the answer
    came), atomically; (whether this was the line's first record, the
    cadence written)."""
    script = conn.client.register_script(FINISH)
    index, member = _index_entry(conn, ticket, record)
    host = layout.bucket_host(cadence_key or claim_key)
    keys = [
        ticket["records"],
        ticket["inflight"],
        layout.bucket(conn, CADENCE, host),
        layout.bucket(conn, CADENCE_CLAIMS, host),
        index,
        layout.legacy(conn, CADENCE),
    ]
    args = [record["line"], json.dumps(record, sort_keys=True), ticket["raw"],
            layout.field(cadence_key, host) if cadence_key else "",
            _seconds(layout.records_ttl(conn)),
            layout.field(claim_key, host) if claim_key else "", conn.worker, member,
            cadence_key, layout.retention_of(conn)[CADENCE], f"{max(0.0, age):.6f}"]  # fmt: skip
    first, at = await conn.call("finish line", lambda r: script(keys=keys, args=args, client=r))
    return bool(int(first)), float(at)


def _seconds(ttl: float) -> int:
    """A TTL as EXPIRE takes it (whole seconds, at least one)."""
    return max(1, math.ceil(ttl))


def _index_entry(
    conn: RedisConnection, ticket: dict[str, str], record: dict[str, Any]
) -> tuple[str, str]:
    """The host's record index and this record's member in it ('' for no host)."""
    host = _record_host(record)
    # where the record and its canonical claim are (a ticket from before
    # "claims" was kept in it names only the records)
    claims = ticket.get("claims") or ticket["records"].replace(":records:", ":canonical:", 1)
    member = json.dumps([ticket["records"], claims, record["line"]]) if host else ""
    return record_index(conn, host or ""), member


class RecordCopies:
    """This machine's copy of the records its workers stored in Redis, so a
    Redis that comes back older or empty gets them again.

    A record is in Redis before its line is acknowledged; a Redis restored
    from an older snapshot has the line back in its queue and no record, and
    the fleet would fetch it again. Each worker appends the records it
    stores to its own file in ``WALSH_STATE_DIR`` (``feed-records-*.jl``,
    one line each, flushed: it survives the process being killed; kept
    ``WALSH_RECORDS_TTL``, as Redis keeps records). When a worker first sees the fleet's
    history marked unknown it publishes every record of this machine again
    (first record still wins), and takes its lines out of the in-flight
    lists they came back to; the feed then acknowledges, instead of handing
    out, a queued line that has its record. Records of machines whose
    workers never run again are not recovered: those lines are fetched again.
    """

    PATTERN = "feed-records-*.jl"

    def __init__(self, conn: RedisConnection, directory: Path) -> None:
        self.conn = conn
        self.directory = directory
        self.path = directory / f"feed-records-{conn.worker}.jl"
        self._file: Any = None
        self._republish = conn.client.register_script(REPUBLISH)
        conn.guard.on_history_lost(self.republish)

    def keep(self, ticket: dict[str, str], record: dict[str, Any]) -> None:
        if self._file is None:
            self._prune()
            self._file = self.path.open("a", encoding="utf-8")
        kept: dict[str, str] = {k: ticket[k] for k in ("raw", "inflight", "records") if k in ticket}
        if "claims" in ticket:
            kept["claims"] = ticket["claims"]
        entry = {"ticket": kept, "record": record}
        self._file.write(json.dumps(entry, sort_keys=True) + "\n")
        self._file.flush()

    def _prune(self) -> None:
        """Files older than the records they copy (WALSH_RECORDS_TTL) go."""
        cutoff = time.time() - layout.records_ttl(self.conn)
        for path in self.directory.glob(self.PATTERN):
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                continue

    def _read(self) -> list[dict[str, Any]]:
        entries: dict[tuple[str, int], dict[str, Any]] = {}
        for path in sorted(self.directory.glob(self.PATTERN)):
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError:
                continue
            for text in lines:
                try:
                    entry = json.loads(text)
                    key = (str(entry["ticket"]["records"]), int(entry["record"]["line"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill mid-write
                entries.setdefault(key, entry)
        return list(entries.values())

    async def republish(self) -> None:
        entries = await maybe_deferred_to_future(deferToThread(self._read))
        if not entries:
            return
        ttl = _seconds(layout.records_ttl(self.conn))
        for i in range(0, len(entries), 500):
            chunk = entries[i : i + 500]

            async def put(r: Any, chunk: list[dict[str, Any]] = chunk) -> None:
                pipe = r.pipeline(transaction=False)
                for entry in chunk:
                    ticket, record = entry["ticket"], entry["record"]
                    index, member = _index_entry(self.conn, ticket, record)
                    raw = ticket.get("raw", "") if ticket.get("inflight") else ""
                    keys = [ticket["records"], index, ticket.get("inflight") or index]
                    args = [record["line"], json.dumps(record, sort_keys=True), ttl, member, raw]
                    await self._republish(keys=keys, args=args, client=pipe)  # queued
                await pipe.execute()

            await self.conn.call("publish records again", put)
        self.conn.inc_stat("records_republished", len(entries))
        logger.warning(
            "Published again %(n)d records this machine's workers stored in Redis: lines that "
            "came back with an older Redis are not fetched again.",
            {"n": len(entries)},
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _record_host(record: dict[str, Any]) -> str | None:
    for field in ("canonical_url", "url"):
        url = record.get(field)
        if isinstance(url, str) and is_http_url(url):
            return url_host(url)
    return None


#: what a purged record keeps: the line as the user gave it and what became
#: of it, so every line still has exactly one record (nothing from the host)
TOMBSTONE_FIELDS = ("line", "url", "canonical_url", "outcome", "rule")


def record_index(conn: RedisConnection, host: str) -> str:
    """The sorted set naming the stored records of *host*'s lines (written
    with each record), so a purge reads one host's records, not every
    record. It keeps what the records keep (WALSH_RECORDS_TTL): a member
    whose record is gone goes as the host's next records are written
    (:data:`~.scripts.INDEX`; a set, in the layout before)."""
    return conn.key("records", "host", host)


async def purge_records(
    conn: RedisConnection,
    matches: Callable[[str], bool],
    cause: Callable[[str], str],
    now: str,
    host: str | None = None,
) -> dict[str, dict[str, int]]:
    """Purge on opt-out for the records of lines fed through Redis: a
    record of a matching host keeps only its line, its URL as listed and its
    outcome, and says it was purged and why (the metadata the host served
    goes); the canonical-URL claims of those lines go. Only *host* when
    given, else every host with stored records that *matches* accepts:
    {host: {"records": n, "claims": n}}."""
    index_prefix = record_index(conn, "")
    purged: dict[str, dict[str, int]] = {}

    async def scrub(r: Any) -> None:
        purged.clear()  # called again from the start if Redis drops mid-way
        if host is not None:
            names = [record_index(conn, host)]
        else:
            pattern = glob_escape(index_prefix) + "*"
            names = [n async for n in r.scan_iter(match=pattern, count=1000)]
        for name in names:
            name_host = name[len(index_prefix) :]
            if not matches(name_host):
                continue
            if await r.type(name) == "set":
                members = list(await r.smembers(name))
            else:
                members = list(await r.zrange(name, 0, -1))
            by_hash: dict[tuple[str, str], list[str]] = {}
            for member in members:
                records_key, claims_key, line = json.loads(member)
                by_hash.setdefault((records_key, claims_key), []).append(str(line))
            counts = {"records": 0, "claims": 0}
            for (records_key, claims_key), lines in sorted(by_hash.items()):
                changed: dict[str, str] = {}
                claims: list[str] = []
                for line, raw in zip(lines, await r.hmget(records_key, lines), strict=True):
                    record = json.loads(raw) if raw else {}
                    if not record or "purged" in record:
                        continue
                    kept = {f: record.get(f) for f in TOMBSTONE_FIELDS}
                    kept["purged"] = {"at": now, "cause": cause(name_host)}
                    changed[line] = json.dumps(kept, sort_keys=True)
                    if record.get("canonical_url"):
                        claims.append(record["canonical_url"])
                if changed:  # records are written once (HSETNX): replacing loses none
                    await r.hset(records_key, mapping=changed)
                    counts["records"] += len(changed)
                if claims:
                    counts["claims"] += await r.hdel(claims_key, *claims)
            if members:  # only what was read: a record finished meanwhile stays indexed
                if await r.type(name) == "set":
                    await r.srem(name, *members)
                else:
                    await r.zrem(name, *members)
            if counts["records"]:
                purged[name_host] = counts

    await conn.call("purge records", scrub)
    return purged
