"""CPU cost per request: this bundle against stock Scrapy
serial with no delay (the impolite floor), on the same URL list in one run.

    .venv/bin/python bench/cost_bench.py                 # 250 hosts x 40 pages, 1 ms latency
    .venv/bin/python bench/cost_bench.py --quick         # 20 hosts x 5 pages, a smoke run
    .venv/bin/python bench/cost_bench.py --repeat 3      # three rounds; medians at the end
    git archive BASE scrapy_walsh_research | tar -x -C /tmp/before
    .venv/bin/python bench/cost_bench.py --before /tmp/before --repeat 3
        # also the bundle as of BASE (imported from that directory), same rounds
    .venv/bin/python bench/cost_bench.py --crawlers walsh,stock,stock-items1
        # also stock with CONCURRENT_ITEMS=1, as the bundle's targets spider runs
    .venv/bin/python bench/cost_bench.py --shape 120x3 --crawlers walsh,stock-items1 --repeat 3
        # 120 hosts x 3 pages at 30 ms: latency-bound, so wall against the
        # serial bound (every request's latency, robots.txt and tdmrep.json
        # included) shows the bundle's own time between a response and the
        # next request
    .venv/bin/python bench/cost_bench.py --shape 120x3 --crawlers walsh --profile /tmp/prof
        # the same crawl under cProfile (slower: read the shares, not the wall)

Each crawl runs as a child process against a fresh loopback multi-host origin
(``multihost_origin.py``); its CPU (user + sys) and peak RSS come from the
child's own rusage (``os.wait4``), so the origin and this script are not
counted. Wall is first arrival to last response at the origin. The bundle's
lower bound is max(requests x latency, the longest per-host chain of 1 s
intervals, a host's chain starting no earlier than one latency per host
started before it). Load on a shared machine moves wall time, so compare the
CPU ratio bundle/stock of the same round; ``uptime`` is printed with each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from politeness_bench import UA, crawl_command, start_origin, url_list

SHAPES = {
    "large": {"hosts": 250, "pages": 40, "order": "interleaved", "latency": 0.001},
    "quick": {"hosts": 20, "pages": 5, "order": "interleaved", "latency": 0.001},
    #: latency-bound: 600 requests (robots.txt, tdmrep.json, 3 pages a host)
    #: of 30 ms, one in flight, so the serial bound is 18 s and any time
    #: the crawler spends between a response and the next request adds to it
    "120x3": {"hosts": 120, "pages": 3, "order": "interleaved", "latency": 0.03},
}
#: stock Scrapy as politeness_bench runs it, minus the per-host delay: the floor
STOCK_NO_DELAY = ["-s", "DOWNLOAD_DELAY=0"]
#: the same with one item task per response, as the bundle's targets spider
#: runs (``stock-items1``): the like-for-like floor for that part of Scrapy
ONE_ITEM_TASK = ["-s", "CONCURRENT_ITEMS=1"]
INTERVAL = 1.0


def lower_bound(hits: list[dict], latency: float) -> float:
    """max(serial time, each host's chain of intervals started no earlier
    than one latency per host whose first request came before it)."""
    per_host: dict[str, list[float]] = defaultdict(list)
    for h in hits:
        per_host[h["host"]].append(h["start"])
    firsts = sorted(per_host, key=lambda host: per_host[host][0])
    chains = (
        k * latency + (len(per_host[host]) - 1) * INTERVAL + latency
        for k, host in enumerate(firsts)
    )
    return max(len(hits) * latency, max(chains, default=0.0))


def run(
    crawler: str, layout: dict, latency: float, port: int, timeout: float, before: str | None,
    profile: Path | None = None,
) -> dict:  # fmt: skip
    """One crawl as a child process; its rusage and what the origin saw.
    ``walsh-before`` is the bundle imported from *before* (an older copy);
    with *profile*, the child runs under cProfile, writing there."""
    tmp = Path(tempfile.mkdtemp(prefix=f"cost-{crawler}-"))
    urls = tmp / "urls.txt"
    targets = url_list(layout["hosts"], layout["pages"], layout["order"], port)
    urls.write_text("\n".join(targets) + "\n")
    log = tmp / "hits.json"
    origin = start_origin(layout, port, latency, log, timeout)
    base = {"walsh-before": "walsh", "stock-items1": "stock"}.get(crawler, crawler)
    command = crawl_command(base, urls, port, tmp)
    env = dict(os.environ)
    if base == "stock":
        command += STOCK_NO_DELAY + (ONE_ITEM_TASK if crawler == "stock-items1" else [])
    elif crawler == "walsh-before":
        assert before is not None
        env["PYTHONPATH"] = before
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        out = profile / f"{crawler}-{time.strftime('%H%M%S')}.prof"
        command = [sys.executable, "-m", "cProfile", "-o", str(out), *command]
    started = time.monotonic()
    with open(tmp / "crawl.err", "w") as err:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    process_wall = time.monotonic() - started
    origin.terminate()
    origin.wait()
    hits = [h for h in json.loads(log.read_text())["hits"] if h["host"] != "127.0.0.1"]
    pages = {(h["host"], h["path"]) for h in hits if h["path"].startswith("/p/")}
    wall = max(h.get("end", h["start"]) for h in hits) - min(h["start"] for h in hits)
    cpu = usage.ru_utime + usage.ru_stime
    bound = lower_bound(hits, latency)
    serial = len(hits) * latency
    return {
        "crawler": crawler, "rc": child.returncode, "requests": len(hits),
        "pages_fetched": len(pages), "pages_expected": len(targets),
        "cpu_s": round(cpu, 3), "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3),
        "cpu_ms_per_request": round(cpu / max(1, len(hits)) * 1000, 4),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "crawl_wall_s": round(wall, 3), "process_wall_s": round(process_wall, 3),
        "lower_bound_s": round(bound, 3), "wall_to_bound": round(wall / bound, 4),
        "serial_bound_s": round(serial, 3), "wall_to_serial": round(wall / serial, 4),
        # the crawler's own time per request between the wire's: wall less latency
        "above_wire_ms_per_request": round((wall - serial) / max(1, len(hits)) * 1000, 3),
        "bad_ua": sum(1 for h in hits if h["ua"] != UA),
        "stderr": str(tmp / "crawl.err"),
    }  # fmt: skip


def uptime() -> str:
    """The 1, 5 and 15 minute load averages (the machine is shared)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--latency", type=float, help="default: the shape's (1 ms; 30 ms for 120x3)")
    ap.add_argument("--port", type=int, default=18480)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quick", action="store_true", help="the same as --shape quick")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="large")
    ap.add_argument(
        "--profile", type=Path, help="run each crawl under cProfile, into this directory"
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--crawlers", default="walsh,stock")
    ap.add_argument("--before", help="a directory holding an older scrapy_walsh_research")
    a = ap.parse_args()
    layout = SHAPES["quick" if a.quick else a.shape]
    if a.latency is None:
        a.latency = layout["latency"]
    crawlers = a.crawlers.split(",")
    if a.before:
        crawlers.insert(0, "walsh-before")
    rounds: list[dict[str, dict]] = []
    for i in range(a.repeat):
        results = {}
        for crawler in crawlers:
            load = uptime()
            r = run(crawler, layout, a.latency, a.port, a.timeout, a.before, a.profile)
            r.update(round=i, load_before=load, load_after=uptime())
            results[crawler] = r
            print(json.dumps(r), flush=True)
        if "stock" in results:
            for r in results.values():
                r["cpu_vs_stock"] = round(r["cpu_s"] / results["stock"]["cpu_s"], 3)
            ratios = {k: r["cpu_vs_stock"] for k, r in results.items() if k != "stock"}
            print(json.dumps({"round": i, "cpu_ratio_to_stock": ratios}), flush=True)
        rounds.append(results)
    print(
        f"\n{layout['hosts']} hosts x {layout['pages']} pages, latency {a.latency} s; "
        "CPU = user+sys of the crawl process; wall = first arrival to last response;\n"
        "serial = requests x latency; over ms = (wall - serial) / requests\n"
    )
    head = (
        f"{'round':>5} {'crawler':<12} {'pages':>11} {'requests':>8} {'CPU s':>7} {'ms/req':>7} "
        f"{'RSS MB':>7} {'wall s':>8} {'bound s':>8} {'wall/bnd':>8} {'serial s':>8} {'wall/ser':>8} "
        f"{'over ms':>7} {'CPU/stock':>9} {'load':<24}"
    )
    print(head)
    print("-" * len(head))
    for results in rounds:
        for r in results.values():
            print(
                f"{r['round']:>5} {r['crawler']:<12} {r['pages_fetched']:>5}/{r['pages_expected']:<5} "
                f"{r['requests']:>8} {r['cpu_s']:>7.2f} {r['cpu_ms_per_request']:>7.3f} "
                f"{r['peak_rss_mb']:>7.1f} {r['crawl_wall_s']:>8.2f} {r['lower_bound_s']:>8.2f} "
                f"{r['wall_to_bound']:>8.4f} {r['serial_bound_s']:>8.2f} {r['wall_to_serial']:>8.4f} "
                f"{r['above_wire_ms_per_request']:>7.3f} {r.get('cpu_vs_stock', 0):>9.3f} {r['load_before']:<24}"
            )
    if len(rounds) > 1:
        summary = {}
        for crawler in crawlers:
            rs = [res[crawler] for res in rounds if crawler in res]
            summary[crawler] = {
                k: statistics.median(r[k] for r in rs)
                for k in ("cpu_s", "cpu_ms_per_request", "peak_rss_mb", "crawl_wall_s",
                          "wall_to_bound", "wall_to_serial", "above_wire_ms_per_request")
            }  # fmt: skip
        if "stock" in summary:
            summary["cpu_ratio_to_stock_median"] = {
                c: statistics.median(res[c]["cpu_vs_stock"] for res in rounds)
                for c in crawlers
                if c != "stock"
            }
        print("\nmedians:", json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
