"""Redis memory benchmark: what a fleet keeps in Redis, per target and per
request, and where that leads after 90 days.

    .venv/bin/python bench/redis_memory_bench.py
    .venv/bin/python bench/redis_memory_bench.py --hosts 100 --pages 4 --workers 2

Runs a crawl and a due re-run (``WALSH_RUN_INTERVAL=0``), each by
``--workers`` worker processes on one Redis feed, against the loopback
multi-host origin (``multihost_origin.py --validators``: every page has an
ETag and a Last-Modified and answers the re-run with a 304; one target in
``--feed-every`` is an RSS feed of ``--feed-entries`` entries). Target URLs
are about ``--url-length`` characters long, as real ones are (the origin's
own are 26).

Then it reads every key of the run's prefix with ``MEMORY USAGE <key>
SAMPLES 0`` and prints the bytes of each key family (hosts, batches and
workers folded), per target, per request and per host; the same again with
every hash in Redis's general encoding (``hashtable``, as a host with more
than ``hash-max-listpack-entries`` entries has: the projection's all-new
case); and the projection to ``--targets-per-day`` targets a day over
``--projection-hosts`` hosts after ``--days`` days, for the same targets
every day and for all-new targets every day, with the audit log's family
apart (kept in Redis for ``--audit-days`` days, or 0 when it is kept
elsewhere). The Redis it starts runs with upstream Redis's encoding limits
(128 entries, 64 bytes), not a distribution's.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from politeness_bench import crawl_command  # noqa: E402

from scrapy_walsh_research.settings import defaults  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

PREFIX = "bench"
#: a host's hash holds at most this many times the entries its retention
#: keeps (a compaction starts when it has grown by half: state/redis/layout_scripts.py)
COMPACT_BOUND = 1.5
#: upstream Redis 7's limits for the compact encodings (Debian's build raises them)
ENCODING = ["--hash-max-listpack-entries", "128", "--hash-max-listpack-value", "64",
            "--zset-max-listpack-entries", "128", "--zset-max-listpack-value", "64"]  # fmt: skip

#: how each family grows: per target (state kept WALSH_STATE_TTL), per record
#: (kept WALSH_RECORDS_TTL), per host, the audit log, or a fixed few keys
GROWTH = [
    (r"state:(cadence|validators|target_answered|seen|cadence_claims):", "target"),
    (r"state:(robots|robots_4xx|robots_unreachable|tdmrep|tdmrep_unreachable|sitemap_\w+):", "host"),
    (r"^host:", "host"),
    (r"targets:(records|canonical):|^records:host:", "record"),
    (r"audit", "audit"),
]


def url_list(hosts: int, pages: int, port: int, length: int, feed_every: int) -> list[str]:
    """*pages* targets on each of *hosts* hosts, interleaved, about *length*
    characters each; every *feed_every*-th one an RSS feed."""
    out = []
    for p in range(pages):
        for h in range(hosts):
            n = p * hosts + h
            head = f"http://127.0.0.{h + 2}:{port}/articles/2026/05/{p:04d}-"
            tail = ".xml" if feed_every and n % feed_every == feed_every - 1 else ".html"
            slug = ("a-realistic-slug-for-the-page-" * 4)[: max(1, length - len(head) - len(tail))]
            out.append(head + slug + tail)
    return out


def family(key: str) -> str:
    name = key[len(PREFIX) + 1 :]
    name = re.sub(r"127\.0\.0\.\d+(:\d+)?", "<host>", name)
    name = re.sub(r"[0-9a-f]{32}", "<batch>", name)
    name = re.sub(r"\d+-[0-9a-f]{8}", "<worker>", name)
    return name


def growth(fam: str) -> str:
    for pattern, kind in GROWTH:
        if re.search(pattern, fam):
            return kind
    return "fixed"


def measure(client: Any) -> dict[str, dict[str, int]]:
    """{family: {bytes, keys, items}} for every key of the run's prefix."""
    sizes: dict[str, dict[str, int]] = collections.defaultdict(
        lambda: {"bytes": 0, "keys": 0, "items": 0}
    )
    counts = {"hash": client.hlen, "zset": client.zcard, "set": client.scard,
              "list": client.llen, "stream": client.xlen}  # fmt: skip
    for key in client.scan_iter(f"{PREFIX}:*", count=1000):
        kind = client.type(key)
        fam = sizes[family(key)]
        fam["bytes"] += int(client.memory_usage(key, samples=0) or 0)
        fam["keys"] += 1
        fam["items"] += int(counts.get(kind, lambda k: 1)(key))
    return dict(sizes)


def as_hashtables(client: Any) -> None:
    """Every hash of the prefix written again in the general encoding."""
    client.config_set("hash-max-listpack-entries", 0)
    for key in client.scan_iter(f"{PREFIX}:*", count=1000):
        if client.type(key) == "hash":
            fields = client.hgetall(key)
            client.delete(key)
            client.hset(key, mapping=fields)
    client.config_set("hash-max-listpack-entries", 128)


def run_fleet(a: argparse.Namespace, redis: RedisServer, urls: Path, tmp: Path, tag: str) -> None:
    from scrapy_walsh_research.state.redis.target_queue import enqueue

    enqueue(redis.url, "targets", urls, prefix=PREFIX)
    base = crawl_command("walsh", urls, a.port, tmp)
    at = base.index("-a")
    del base[at : at + 2]  # no -a list=: the lines come from Redis
    base += ["-a", "redis_key=targets", "-s", f"WALSH_REDIS_URL={redis.url}",
             "-s", f"WALSH_REDIS_PREFIX={PREFIX}", "-s", "WALSH_RUN_INTERVAL=0",
             "-s", "LOG_LEVEL=WARNING"]  # fmt: skip
    errs = [open(tmp / f"{tag}{i}.err", "w") for i in range(a.workers)]
    procs = [subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=e, cwd=tmp) for e in errs]
    for p in procs:
        if p.wait(timeout=a.timeout) != 0:
            raise SystemExit(f"a worker of the {tag} failed: see {tmp}/{tag}*.err")
    for e in errs:
        e.close()


def project(a: argparse.Namespace, per: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Bytes at day *days* under each case (see the module)."""
    t, hosts, days = a.targets_per_day, a.projection_hosts, a.days
    state_days = min(days, defaults.WALSH_STATE_TTL / 86400)
    record_days = min(days, defaults.WALSH_RECORDS_TTL / 86400)
    host = per["compact"]["host"] * hosts
    records = per["compact"]["record"] * t * record_days
    same = per["compact"]["target"] * t  # each target's state written again daily
    # all new: WALSH_STATE_TTL of targets, in the hosts' large hashes; a
    # host's hash holds up to half again what it keeps before its compaction
    # comes round (COMPACT_BOUND)
    new = per["hashtable"]["target"] * t * state_days * COMPACT_BOUND
    fixed = per["compact"]["fixed_total"]
    audit_day = per["compact"]["audit_per_request"] * t * a.requests_per_target
    parts = {"state_same": same, "state_new": new, "records": records, "hosts": host}
    return {
        "same_targets": same + records + host + fixed,
        "new_targets": new + records + host + fixed,
        "parts": {**parts, "fixed": fixed},
        "audit_per_day": audit_day,
        "audit_in_redis": audit_day * min(days, a.audit_days),
        "audit_outside": 0.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--port", type=int, default=18095)
    ap.add_argument("--url-length", type=int, default=80)
    ap.add_argument("--feed-every", type=int, default=10, help="one target in N is a feed (0: none)")
    ap.add_argument("--feed-entries", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--targets-per-day", type=float, default=1e6)
    ap.add_argument("--projection-hosts", type=float, default=1e5)
    ap.add_argument("--days", type=float, default=90)
    ap.add_argument("--audit-days", type=float, default=defaults.WALSH_AUDIT_RETENTION / 86400)
    ap.add_argument("--requests-per-target", type=float, default=1.2,
                    help="requests a day per target (targets plus robots.txt and tdmrep.json "
                    "once a day per host: 10 targets a host)")  # fmt: skip
    ap.add_argument("--budget-gb", type=float, default=25)
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="redis-mem-"))
    urls = tmp / "urls.txt"
    lines = url_list(a.hosts, a.pages, a.port, a.url_length, a.feed_every)
    urls.write_text("\n".join(lines) + "\n")
    redis = RedisServer(tmp / "redis", persist=True, config=ENCODING).start()
    redis.age(31)  # a Redis seconds old may have lost a fleet's history: the fleet would wait
    log = tmp / "hits.json"
    origin = subprocess.Popen(
        [sys.executable, str(HERE / "multihost_origin.py"), "--hosts", str(a.hosts),
         "--port", str(a.port), "--latency", "0.01", "--log", str(log),
         "--max-seconds", str(2 * a.timeout), "--validators",
         "--feed-entries", str(a.feed_entries)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert origin.stdout is not None and origin.stdout.readline().strip() == "ready"
    started = time.monotonic()
    try:
        run_fleet(a, redis, urls, tmp, "crawl")
        run_fleet(a, redis, urls, tmp, "rerun")
    finally:
        origin.terminate()
        origin.wait()
    wall = time.monotonic() - started
    hits = [h for h in json.loads(log.read_text())["hits"] if h["host"] != "127.0.0.1"]
    targets = len(lines)
    requests = len(hits)
    pages = sum(1 for h in hits if h["path"].startswith("/articles/"))
    statuses = collections.Counter(h["status"] for h in hits if h["path"].startswith("/articles/"))
    client = redis.client()
    try:
        compact = measure(client)
        as_hashtables(client)
        general = measure(client)
    finally:
        client.close()
        redis.kill()

    def per_unit(sizes: dict[str, dict[str, int]]) -> dict[str, float]:
        by: dict[str, float] = collections.defaultdict(float)
        for fam, s in sizes.items():
            by[growth(fam)] += s["bytes"]
        return {
            "target": by["target"] / targets,
            "record": by["record"] / (2 * targets),  # a record per line per run
            "host": by["host"] / a.hosts,
            "fixed_total": by["fixed"],
            "audit_per_request": by["audit"] / requests if requests else 0.0,
        }

    per = {"compact": per_unit(compact), "hashtable": per_unit(general)}
    proj = project(a, per)
    avg_url = sum(map(len, lines)) / len(lines)
    print(f"\n{time.strftime('%Y-%m-%d')}: {a.hosts} hosts x {a.pages} targets ({targets}; "
          f"one in {a.feed_every} a feed of {a.feed_entries} entries; URLs {avg_url:.0f} chars), "
          f"{a.workers} workers, crawl + due re-run in {wall:.0f} s: {requests} requests "
          f"({pages} to targets: {dict(statuses)})\n")  # fmt: skip
    head = (f"{'key family':<44} {'grows per':>9} {'keys':>6} {'items':>6} {'bytes':>10} "
            f"{'B/target':>9} {'B/request':>9} {'hashtable B':>11}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for fam, s in sorted(compact.items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"{fam:<44} {growth(fam):>9} {s['keys']:>6} {s['items']:>6} {s['bytes']:>10} "
              f"{s['bytes'] / targets:>9.1f} {s['bytes'] / requests:>9.1f} "
              f"{general[fam]['bytes']:>11}")  # fmt: skip
    total = sum(s["bytes"] for s in compact.values())
    audit = sum(s["bytes"] for f, s in compact.items() if growth(f) == "audit")
    print(f"{'total (audit apart)':<44} {'':>9} {'':>6} {'':>6} {total - audit:>10} "
          f"{(total - audit) / targets:>9.1f} {(total - audit) / requests:>9.1f}")  # fmt: skip
    print()
    for enc in ("compact", "hashtable"):
        p = per[enc]
        print(f"per unit ({enc}): {p['target']:.0f} B per target (state), {p['record']:.0f} B per "
              f"record, {p['host']:.0f} B per host, {p['fixed_total']:.0f} B fixed, "
              f"audit {p['audit_per_request']:.0f} B per request")  # fmt: skip
    gb = 1e9
    print(f"\nprojection: {a.targets_per_day:.0e} targets a day over {a.projection_hosts:.0e} hosts, "
          f"day {a.days:.0f}; WALSH_STATE_TTL {defaults.WALSH_STATE_TTL / 86400:.0f} d, "
          f"WALSH_RECORDS_TTL {defaults.WALSH_RECORDS_TTL / 86400:.0f} d")  # fmt: skip
    parts = proj["parts"]
    print(f"  records, indexes, canonical claims ({defaults.WALSH_RECORDS_TTL / 86400:.0f} d of "
          f"records): {parts['records'] / gb:.2f} GB; per host: {parts['hosts'] / gb:.2f} GB")  # fmt: skip
    print(f"  same targets every day: state {parts['state_same'] / gb:.2f} GB, "
          f"total {proj['same_targets'] / gb:.2f} GB")  # fmt: skip
    print(f"  all-new targets every day: state {parts['state_new'] / gb:.2f} GB (hashtable "
          f"encoding, {COMPACT_BOUND:g} x the TTL's targets: the compaction's bound), "
          f"total {proj['new_targets'] / gb:.2f} GB")  # fmt: skip
    window = defaults.WALSH_AUDIT_REDIS_WINDOW / 86400
    print(f"  audit log ({a.requests_per_target} requests a target a day): "
          f"{proj['audit_per_day'] * min(a.days, window) / gb:.2f} GB kept in Redis for "
          f"WALSH_AUDIT_REDIS_WINDOW ({window:.0f} d), {proj['audit_in_redis'] / gb:.2f} GB for "
          f"{min(a.days, a.audit_days):.0f} d; 0 with WALSH_AUDIT_URL (kept outside Redis)")  # fmt: skip
    worst = max(proj["same_targets"], proj["new_targets"])
    verdict = "within" if worst <= a.budget_gb * gb else "OVER"
    print(f"  worst case at day {a.days:.0f}, audit outside Redis: {worst / gb:.2f} GB, "
          f"{verdict} {a.budget_gb:.0f} GB")  # fmt: skip
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "targets": targets,
                      "requests": requests, "per": per, "projection": proj,
                      "families": compact}))  # fmt: skip
    return 0 if worst <= a.budget_gb * gb else 1


if __name__ == "__main__":
    sys.exit(main())
