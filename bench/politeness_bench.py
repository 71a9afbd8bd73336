"""Politeness benchmark: this bundle and stock Scrapy, same workloads, one run.

    .venv/bin/python bench/politeness_bench.py            # the three politeness layouts
    .venv/bin/python bench/politeness_bench.py --quick    # a small layout, for a smoke run
    .venv/bin/python bench/politeness_bench.py --large --latency 0.001 --crawlers walsh
        # 250 hosts x 40 pages (10^4 targets); gaps under 1 s are counted
    .venv/bin/python bench/politeness_bench.py --workers 4
        # 1 and 4 worker processes sharing one Redis (needs redis-server)
    .venv/bin/python bench/politeness_bench.py --workers 4 --launcher
        # the same, each fleet forked by one `scrapy walsh-workers N`

For each layout and crawler it starts a fresh loopback multi-host origin
(``multihost_origin.py``, one listener per 127.0.0.x), runs the crawl as a
separate process and prints, from what the origin logged: wall time (first
arrival to last response), the lower bound
max(requests x latency, busiest host's (requests - 1) x interval + latency),
their ratio, the minimum same-host gap and the maximum in flight. The
figures are printed as a table and as JSON lines.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
UA = "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)"
SCRAPY = str(Path(sys.executable).parent / "scrapy")

LAYOUTS = {
    "host-major": {"hosts": 20, "pages": 4, "order": "host-major"},
    "interleaved": {"hosts": 20, "pages": 4, "order": "interleaved"},
    "mixed": {"hosts": 30, "pages": 20, "order": "mixed"},
}
QUICK = {"quick": {"hosts": 4, "pages": 3, "order": "interleaved"}}
LARGE = {"large": {"hosts": 250, "pages": 40, "order": "interleaved"}}
#: the multi-process mode: a many-host workload (throughput) and a few busy
#: hosts (every worker wants the same hosts: the shared budget is what holds)
MULTI = {
    "many-host": {"hosts": 100, "pages": 4, "order": "interleaved"},
    "few-hosts": {"hosts": 4, "pages": 15, "order": "interleaved"},
}


def url_list(hosts: int, pages: int, order: str, port: int) -> list[str]:
    names = [f"127.0.0.{i + 2}" for i in range(hosts)]
    if order == "host-major":
        pairs = [(h, p) for h in names for p in range(pages)]
    elif order == "interleaved":
        pairs = [(h, p) for p in range(pages) for h in names]
    else:  # mixed: the first host gets every page, the others one each
        pairs = [(names[0], p) for p in range(pages)] + [(h, 0) for h in names[1:]]
    return [f"http://{h}:{port}/p/{p}" for h, p in pairs]


#: stock Scrapy serial with no delay and one item task, as the targets spider
#: runs: not polite, but what Scrapy itself needs per request (its floor)
FLOOR = ["-s", "DOWNLOAD_DELAY=0", "-s", "CONCURRENT_ITEMS=1"]


def crawl_command(crawler: str, urls: Path, port: int, tmp: Path) -> list[str]:
    if crawler in ("stock", "floor"):
        stock = [SCRAPY, "runspider", str(HERE / "baseline_spider.py"), "-a", f"list={urls}"]
        return stock + (FLOOR if crawler == "floor" else [])
    base = f"http://127.0.0.1:{port}/.well-known/walsh-research"
    signing: list[str] = []
    if crawler == "walsh-signed":  # the bundle, signing every request (Web Bot Auth)
        from scrapy_walsh_research.identity.signing import generate_key

        key = tmp / "walsh.pem"
        if not key.exists():
            generate_key(key)
        signing = ["-s", f"WALSH_SIGNING_KEY={key}"]
    return [
        SCRAPY, "runspider", str(HERE / "walsh_spider.py"), "-a", f"list={urls}",
        "-s", f"WALSH_BLOCKLIST_URL={base}/blocklist.json",
        "-s", f"WALSH_BLOCKLIST_SCHEMA_URL={base}/blocklist.schema.json",
        "-s", "WALSH_BLOCKLIST_ALLOW_HTTP=True",
        "-s", f"WALSH_STATE_DIR={tmp / 'state'}",
        *signing,
    ]  # fmt: skip


def start_origin(
    layout: dict, port: int, latency: float, log: Path, timeout: float
) -> subprocess.Popen:
    """A fresh loopback multi-host origin for *layout*, logging to *log*, once it is ready."""
    origin = subprocess.Popen(
        [sys.executable, str(HERE / "multihost_origin.py"), "--hosts", str(layout["hosts"]),
         "--port", str(port), "--latency", str(latency), "--log", str(log),
         "--max-seconds", str(timeout + 30)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert origin.stdout is not None and origin.stdout.readline().strip() == "ready"
    return origin


def measure(
    crawler: str, layout: dict, latency: float, port: int, timeout: float,
    workers: int = 0, redis_url: str | None = None, launcher: bool = False,
) -> dict:  # fmt: skip
    """One crawl: *crawler* alone, or, with *workers*, that many processes
    taking lines from one Redis feed and sharing its per-host clocks (with
    *launcher*, forked by one ``scrapy walsh-workers``)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{crawler}-"))
    urls = tmp / "urls.txt"
    urls.write_text(
        "\n".join(url_list(layout["hosts"], layout["pages"], layout["order"], port)) + "\n"
    )
    log = tmp / "hits.json"
    origin = start_origin(layout, port, latency, log, timeout)
    if workers:
        assert redis_url is not None
        from scrapy_walsh_research.state.redis.target_queue import enqueue

        prefix = f"bench-{tmp.name}"
        enqueue(redis_url, "targets", urls, prefix=prefix)
        base = crawl_command(crawler, urls, port, tmp)
        at = base.index("-a")
        del base[at : at + 2]  # no -a list=: the lines come from Redis
        base += ["-a", "redis_key=targets", "-s", f"WALSH_REDIS_URL={redis_url}",
                 "-s", f"WALSH_REDIS_PREFIX={prefix}"]  # fmt: skip
        if launcher:  # one `scrapy walsh-workers N`: the fleet forked after one start-up
            at = base.index("runspider")
            del base[at : at + 2]
            base[at:at] = ["walsh-workers", str(workers), "-s", "SPIDER_MODULES=walsh_spider"]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
            started = time.monotonic()
            with open(tmp / "workers.err", "w") as err:
                rc = subprocess.run(base, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp,
                                    env=env, timeout=timeout, check=False).returncode  # fmt: skip
        else:
            started = time.monotonic()
            errs = [open(tmp / f"w{i}.err", "w") for i in range(workers)]
            procs = [
                subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=e, cwd=tmp,
                                 env={**os.environ, "BENCH_WORKER": str(i)})
                for i, e in enumerate(errs)
            ]  # fmt: skip
            rc = max(p.wait(timeout=timeout) for p in procs)
            for e in errs:
                e.close()
    else:
        started = time.monotonic()
        with open(tmp / "crawl.err", "w") as err:
            rc = subprocess.run(
                crawl_command(crawler, urls, port, tmp), stdout=subprocess.DEVNULL, stderr=err,
                timeout=timeout, check=False, cwd=tmp,
            ).returncode  # fmt: skip
    exited = time.monotonic()
    process_wall = exited - started
    origin.terminate()
    origin.wait()
    data = json.loads(log.read_text())
    hits = [h for h in data["hits"] if h["host"] != "127.0.0.1"]
    per_host: dict[str, list[dict]] = defaultdict(list)
    for h in hits:
        per_host[h["host"]].append(h)
    interval = 1.0
    gaps = [b["start"] - a["start"] for hs in per_host.values() for a, b in itertools.pairwise(hs)]
    busiest = max((len(hs) for hs in per_host.values()), default=0)
    bound = max(len(hits) * latency, (busiest - 1) * interval + latency)
    wall = max(h.get("end", h["start"]) for h in hits) - min(h["start"] for h in hits)
    pages = {(h["host"], h["path"]) for h in hits if h["path"].startswith("/p/")}
    per_worker: dict[str, list[dict]] = defaultdict(list)
    for h in hits:
        per_worker[h.get("worker", "")].append(h)
    return {
        "crawler": crawler, "latency": latency, "workers": workers or 1, "layout": layout["order"], "hosts": layout["hosts"], "pages": layout["pages"],
        "rc": rc, "requests": len(hits), "pages_fetched": len(pages),
        # where process wall goes beyond the crawl: start-up (launch to the
        # first request of any kind, the operator's blocklist included; then
        # to the first target host) and shut-down (last response to last exit)
        "launch_to_first_request_s": round(min(h["start"] for h in data["hits"]) - started, 3),
        "launch_to_first_target_s": round(min(h["start"] for h in hits) - started, 3),
        "last_response_to_exit_s": round(exited - max(h.get("end", h["start"]) for h in hits), 3),
        "pages_expected": len(url_list(layout["hosts"], layout["pages"], layout["order"], port)),
        "crawl_wall_s": round(wall, 3), "process_wall_s": round(process_wall, 3),
        "lower_bound_s": round(bound, 3), "ratio_to_bound": round(wall / bound, 3),
        "min_same_host_gap_s": round(min(gaps), 4) if gaps else None,
        "gaps": len(gaps), "gaps_under_interval": sum(g < interval for g in gaps),
        "max_inflight": data["max_inflight"], "bad_ua": sum(1 for h in hits if h["ua"] != UA),
        "signed": sum(1 for h in hits if h.get("signed")),
        "requests_per_worker": sorted((len(v) for v in per_worker.values()), reverse=True),
        "max_inflight_per_worker": max((_inflight(v) for v in per_worker.values()), default=0),
    }  # fmt: skip


def _inflight(hits: list[dict]) -> int:
    """The most of *hits* in flight at once, from their arrival and end times."""
    events = sorted([(h["start"], 1) for h in hits] + [(h.get("end", h["start"]), -1) for h in hits],
                    key=lambda e: (e[0], e[1]))  # fmt: skip
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--large", action="store_true", help="250 hosts x 40 pages (10^4 targets)")
    ap.add_argument(
        "--crawlers", default="walsh,stock,floor",
        help="walsh, walsh-signed, stock (DOWNLOAD_DELAY=1), floor (stock serial, no delay)",
    )  # fmt: skip
    ap.add_argument("--workers", type=int, default=0, help="multi-process mode: N workers vs 1")
    ap.add_argument(
        "--launcher", action="store_true",
        help="with --workers: start them (and the one) as one `scrapy walsh-workers N`",
    )  # fmt: skip
    ap.add_argument(
        "--signing", action="store_true",
        help="the bundle with and without Web Bot Auth signing, and the signing cost per request",
    )  # fmt: skip
    a = ap.parse_args()
    if a.workers:
        return multi(a)
    if a.signing:
        a.crawlers = "walsh,walsh-signed"
    results = []
    for name, layout in (QUICK if a.quick else LARGE if a.large else LAYOUTS).items():
        for crawler in a.crawlers.split(","):
            r = measure(crawler, layout, a.latency, a.port, a.timeout)
            r["name"] = name
            results.append(r)
            print(json.dumps(r), flush=True)
    print(
        f"\nlatency {a.latency} s, interval 1 s; wall = first arrival to last response at the origin\n"
    )
    head = f"{'layout':<12} {'crawler':<12} {'pages':>11} {'requests':>8} {'wall s':>8} {'bound s':>8} {'ratio':>6} {'min gap s':>9} {'gaps < 1 s':>10} {'inflight':>8} {'bad UA':>6} {'signed':>6}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r['name']:<12} {r['crawler']:<12} {r['pages_fetched']:>5}/{r['pages_expected']:<5} {r['requests']:>8} "
            f"{r['crawl_wall_s']:>8.2f} {r['lower_bound_s']:>8.2f} {r['ratio_to_bound']:>6.3f} "
            f"{r['min_same_host_gap_s']:>9.4f} {r['gaps_under_interval']:>4}/{r['gaps']:<5} {r['max_inflight']:>8} {r['bad_ua']:>6} {r['signed']:>6}"
        )
    floor_ratios(results)
    if a.signing:
        signing_cost(results)
    return 0


def floor_ratios(results: list[dict]) -> None:
    """Wall time against what any Scrapy crawl can do on the layout: the
    bound counts no time between one response and the next request, but
    Scrapy itself needs some (the floor crawler, serial with no delay, shows
    how much), so the bundle is also compared with max(bound, floor's wall)."""
    by = {(r["name"], r["crawler"]): r for r in results}
    lines = []
    for (name, crawler), r in by.items():
        floor = by.get((name, "floor"))
        if floor is None or crawler == "floor":
            continue
        reach = max(r["lower_bound_s"], floor["crawl_wall_s"])
        requests = max(1, floor["requests"])
        per_request = (floor["crawl_wall_s"] - floor["requests"] * r["latency"]) / requests
        lines.append(
            f"  {name:<12} {crawler:<12} wall {r['crawl_wall_s']:.2f} s / max(bound {r['lower_bound_s']:.2f}, "
            f"floor {floor['crawl_wall_s']:.2f}) = {r['crawl_wall_s'] / reach:.3f}"
            f"   (Scrapy's own turnaround: {per_request * 1000:.1f} ms a request)"
        )  # fmt: skip
    if lines:
        print("\nagainst what Scrapy itself reaches (the floor: stock serial, no delay):")
        print("\n".join(lines))


def signing_cost(results: list[dict]) -> None:
    """What signing adds per request: the signer timed alone over the
    layouts' URLs (the crawls' wall times differ by more than that in noise),
    and the crawls side by side."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from scrapy_walsh_research.identity.signing import Signer

    signer = Signer(Ed25519PrivateKey.generate())
    urls = [u for layout in LAYOUTS.values()
            for u in url_list(layout["hosts"], layout["pages"], layout["order"], 8899)]  # fmt: skip
    n = 20000
    started = time.perf_counter()
    for i in range(n):
        signer.sign_request("GET", urls[i % len(urls)], {})
    per = (time.perf_counter() - started) / n * 1000
    print(f"\nsigning: {per:.3f} ms per request ({n} signatures, Ed25519, "
          f"{'template' if signer._fast else 'library'} path)")  # fmt: skip
    by = {(r["name"], r["crawler"]): r for r in results}
    for name in {r["name"] for r in results}:
        if (name, "walsh") in by and (name, "walsh-signed") in by:
            a, b = by[(name, "walsh")], by[(name, "walsh-signed")]
            delta = (b["crawl_wall_s"] - a["crawl_wall_s"]) / max(1, b["requests"]) * 1000
            print(f"  {name}: wall {a['crawl_wall_s']:.2f} s unsigned, {b['crawl_wall_s']:.2f} s "
                  f"signed ({delta:+.2f} ms per request of wall time)")  # fmt: skip


def multi(a: argparse.Namespace) -> int:
    """N worker processes sharing one Redis against one worker."""
    from scrapy.settings import Settings

    sys.path.insert(0, str(HERE.parent))  # the real redis-server the tests start
    from scrapy_walsh_research.settings.walsh import WalshSettings
    from scrapy_walsh_research.state.redis.connection import lost_history_wait, young_redis_s
    from tests.support.redis_server import RedisServer

    redis = RedisServer(Path(tempfile.mkdtemp(prefix="bench-redis-")), persist=False).start()
    url = redis.url
    # A Redis only seconds old may, for all a worker can tell, have restarted
    # empty: a fleet that meets it first makes every host wait
    # (docs/redis.rst). The fleets are timed after that, as against a Redis
    # that has been up a while.
    young = young_redis_s(lost_history_wait(WalshSettings.from_settings(Settings())))
    print(f"waiting {young:.0f} s: a Redis younger than that counts as lost history")
    redis.age(young)
    try:
        results = []
        for name, layout in MULTI.items():
            for n in (1, a.workers):
                r = measure("walsh", layout, a.latency, a.port, a.timeout, workers=n,
                            redis_url=url, launcher=a.launcher)  # fmt: skip
                r["name"] = name
                results.append(r)
                print(json.dumps(r), flush=True)
    finally:
        redis.kill()
    how = "one `scrapy walsh-workers N` each" if a.launcher else "N `scrapy runspider` processes"
    print(
        f"\nlatency {a.latency} s, interval 1 s; one Redis; {how}; process wall = launch to last exit\n"
    )
    head = f"{'layout':<10} {'workers':>7} {'pages':>9} {'requests':>8} {'process s':>9} {'origin s':>8} {'vs 1':>6} {'start s':>7} {'end s':>6} {'min gap s':>9} {'inflight':>8} {'per worker':>10} {'requests per worker':<20} {'bad UA':>6}"
    print(head)
    print("-" * len(head))
    one: dict[str, float] = {}
    for r in results:
        if r["workers"] == 1:
            one[r["name"]] = r["process_wall_s"]
        ratio = r["process_wall_s"] / one[r["name"]]
        print(
            f"{r['name']:<10} {r['workers']:>7} {r['pages_fetched']:>4}/{r['pages_expected']:<4} "
            f"{r['requests']:>8} {r['process_wall_s']:>9.2f} {r['crawl_wall_s']:>8.2f} {ratio:>6.3f} "
            f"{r['launch_to_first_target_s']:>7.2f} {r['last_response_to_exit_s']:>6.2f} "
            f"{r['min_same_host_gap_s']:>9.3f} {r['max_inflight']:>8} {r['max_inflight_per_worker']:>10} "
            f"{'/'.join(map(str, r['requests_per_worker'])):<20} {r['bad_ua']:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
