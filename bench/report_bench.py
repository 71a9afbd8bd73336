"""Report benchmark: one host's ``scrapy walsh-report`` over a large audit log.

    .venv/bin/python bench/report_bench.py                  # 10^6 entries, every store
    .venv/bin/python bench/report_bench.py --entries 10000000 --stores sqlite
    .venv/bin/python bench/report_bench.py --quick          # 10^5 entries, a smoke run

Writes a synthetic audit log into each store (SQLite ``audit.sqlite3``;
PostgreSQL, a private cluster started here, as ``WALSH_AUDIT_URL``; Redis,
one stream per host as a fleet without it keeps them): entries of
``--hosts`` hosts spread over 90 days, as a fleet's requests, answers and
decisions are (3.4 entries a target), plus two hosts asked for: ``one.test``
with a typical host's 90 days (3,000 entries) and ``big.test`` with 100,000
(more than a page lists: the report keeps the latest rows and counts all).
Then runs ``scrapy walsh-report --host H --json`` as an operator would, in
its own process, and prints its wall time and peak memory (max RSS), and,
for Redis, what reading 0.3's single stream (``XRANGE`` of every entry)
took instead. Each figure is one child process's own (``wait4``). Needs redis-server and PostgreSQL's server
(``scripts/install-redis.sh``, ``scripts/install-postgres.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

DAY = 86400
NOW = time.time()
TYPICAL, BIG = 3_000, 100_000


def entries(n: int, hosts: int) -> Iterator[dict[str, Any]]:
    """*n* entries over *hosts* hosts and 90 days, then the two asked for."""
    rng = random.Random(7)
    start = NOW - 90 * DAY
    for i in range(n):
        host = f"h{rng.randrange(hosts)}.example.org"
        yield _entry(i, host, start + (i / n) * 90 * DAY)
    for host, count in (("one.test", TYPICAL), ("big.test", BIG)):
        for i in range(count):
            yield _entry(i, host, start + (i / count) * 90 * DAY, f"{host}-")


def _entry(i: int, host: str, t: float, prefix: str = "") -> dict[str, Any]:
    kind = ("request", "response", "decision")[i % 3]
    e: dict[str, Any] = {
        "t": t, "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)), "event": kind,
        "host": host, "url": f"https://{host}/articles/2026/{i // 3:08d}/a-long-enough-slug",
        "id": f"{prefix}{i // 3:012x}",
    }  # fmt: skip
    if kind == "request":
        e.update(kind="target", method="GET", interval=1.0, interval_set_by="floor",
                 user_agent="Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)",
                 robots_sha256="ab" * 32, keyid=None, blocklist=None)  # fmt: skip
    elif kind == "response":
        e.update(status=200, error=None)
    else:
        e.update(line=i // 3, outcome="fetched", rule=None, reason=None, status=200)
    return e


def fill_sqlite(path: Path, n: int, hosts: int) -> None:
    from scrapy_walsh_research.core.urls import host_key
    from scrapy_walsh_research.evidence.audit_sqlite import SQLiteAudit

    store = SQLiteAudit(path)
    db = store.db
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO audit (t, host, rhost, entry) VALUES (?, ?, ?, ?)",
        ((e["t"], e["host"], host_key(e["host"]), json.dumps(e, sort_keys=True))
         for e in entries(n, hosts)),
    )  # fmt: skip
    db.execute("COMMIT")
    db.close()


def fill_postgres(url: str, n: int, hosts: int) -> None:
    import asyncio

    import psycopg
    from psycopg.types.json import Jsonb

    from scrapy_walsh_research.core.urls import host_key
    from scrapy_walsh_research.evidence.audit_postgres import PostgresAudit

    audit = PostgresAudit(url, "walsh_audit")

    async def tables() -> None:
        conn = await audit._connection()
        for day in range(int((NOW - 91 * DAY) // DAY), int(NOW // DAY) + 1):
            await audit._partition(conn, day)
        await audit.close()

    asyncio.run(tables())
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy("COPY walsh_audit (t, host, rhost, event, entry) FROM STDIN") as copy:
            for e in entries(n, hosts):
                copy.write_row((e["t"], e["host"], host_key(e["host"]), e["event"], Jsonb(e)))
        conn.commit()
        cur.execute("ANALYZE walsh_audit")


def fill_redis(client: Any, n: int, hosts: int) -> None:
    from scrapy_walsh_research.core.urls import host_key

    pipe = client.pipeline(transaction=False)
    for i, e in enumerate(entries(n, hosts)):
        data = json.dumps(e, sort_keys=True)
        pipe.xadd(f"walsh:audit:h:{e['host']}", {"e": data})
        pipe.zadd("walsh:audit:hosts", {host_key(e["host"]): 0})
        pipe.xadd("walsh:legacy", {"e": data})  # 0.3's one stream, for comparison
        if i % 5000 == 4999:
            pipe.execute()
    pipe.execute()


def report(host: str, settings: list[str], cwd: Path) -> dict[str, Any]:
    """``scrapy walsh-report --host H --json`` in its own process: wall time,
    peak RSS, and what it found."""
    out, err = cwd / "report.json", cwd / "report.err"
    started = time.monotonic()
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scrapy", "walsh-report", *settings, "--host", host, "--json"],
            cwd=cwd, stdout=o, stderr=e,
        )  # fmt: skip
        # this child's own peak memory (not the largest of all children so far)
        _, status, usage = os.wait4(proc.pid, 0)
    took = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(err.read_text())
    data = json.loads(out.read_text())
    return {"host": host, "seconds": round(took, 2), "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "requests": data["request_count"], "rows": len(data["requests"])}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=100_000)
    ap.add_argument("--stores", default="sqlite,postgres,redis")
    ap.add_argument("--quick", action="store_true", help="10^5 entries")
    a = ap.parse_args()
    n = 100_000 if a.quick else a.entries
    tmp = Path(tempfile.mkdtemp(prefix="report-bench-"))
    results = []
    # a baseline: the report's own start-up (Scrapy, the bundle), on an empty log
    (tmp / "empty").mkdir()
    fill_sqlite(tmp / "empty" / "audit.sqlite3", 0, 1)
    base = report("none.test", ["-s", f"WALSH_STATE_DIR={tmp / 'empty'}"], tmp)
    print(f"start-up, empty log: {base['seconds']} s, max RSS {base['max_rss_mb']} MB", flush=True)
    total = n + TYPICAL + BIG
    for store in a.stores.split(","):
        started = time.monotonic()
        extra: dict[str, Any] = {}
        if store == "sqlite":
            state = tmp / "sqlite"
            fill_sqlite(state / "audit.sqlite3", n, a.hosts)
            settings = ["-s", f"WALSH_STATE_DIR={state}"]
            cleanup = None
        elif store == "postgres":
            from tests.support.postgres_server import PostgresServer

            pg = PostgresServer().start()
            fill_postgres(pg.url, n, a.hosts)
            settings = ["-s", f"WALSH_AUDIT_URL={pg.url}", "-s", f"WALSH_STATE_DIR={tmp / 'x'}"]
            cleanup = pg.remove
        else:
            from tests.support.redis_server import RedisServer

            redis = RedisServer(tmp / "redis", persist=False).start()
            client = redis.client()
            fill_redis(client, n, a.hosts)
            extra["used_memory_mb"] = round(client.info("memory")["used_memory"] / 2**20)
            t0 = time.monotonic()
            read = 0
            last = "-"
            while True:  # 0.3's read: every entry of the one stream, a page at a time
                rows = client.xrange("walsh:legacy", min=last, max="+", count=10_000)
                read += len(rows)
                if len(rows) < 10_000:
                    break
                last = "(" + rows[-1][0]
            extra["whole_stream_read_s"] = round(time.monotonic() - t0, 2)
            client.delete("walsh:legacy")
            client.close()
            settings = ["-s", f"WALSH_REDIS_URL={redis.url}"]
            cleanup = redis.kill
        filled = time.monotonic() - started
        try:
            for host in ("one.test", "big.test"):
                r = report(host, settings, tmp)
                r.update(store=store, entries=total, fill_s=round(filled, 1), **extra)
                results.append(r)
                print(json.dumps(r), flush=True)
        finally:
            if cleanup is not None:
                cleanup()
    print(f"\n{total:,} audit entries ({n:,} over {a.hosts:,} hosts, one.test {TYPICAL:,}, "
          f"big.test {BIG:,}); scrapy walsh-report --host H --json, in its own process\n")  # fmt: skip
    head = f"{'store':<9} {'host':<9} {'requests':>8} {'rows':>6} {'seconds':>8} {'max RSS MB':>10}"
    print(head + "\n" + "-" * len(head))
    for r in results:
        print(f"{r['store']:<9} {r['host']:<9} {r['requests']:>8} {r['rows']:>6} "
              f"{r['seconds']:>8.2f} {r['max_rss_mb']:>10.1f}")  # fmt: skip
    redis_rows = [r for r in results if r["store"] == "redis"]
    if redis_rows:
        print(f"\nRedis: {redis_rows[0]['used_memory_mb']} MB used; reading 0.3's one stream "
              f"(every entry, as its report did) took {redis_rows[0]['whole_stream_read_s']} s")  # fmt: skip
    print(f"(a report's own start-up, on an empty log: {base['seconds']} s, max RSS {base['max_rss_mb']} MB)")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
