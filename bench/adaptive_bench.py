"""Adaptive pacing benchmark: this bundle and stock Scrapy with
AutoThrottle against hosts that behave like servers under strain, one run.

    .venv/bin/python bench/adaptive_bench.py            # the full layout (about 5 min)
    .venv/bin/python bench/adaptive_bench.py --quick    # a small one (under 3 min)

A loopback origin (``multihost_origin.py --model``) serves one host per
address, each with a capacity model: a request costs service time, latency
grows with the backlog, past a threshold the host answers 503 without
Retry-After; some hosts have a phase where capacity drops or the host is down,
then heal. The hosts (full layout):

* ``healthy-1..3``: 100 ms a request, 40 targets each;
* ``slow``: 1.5 s a request (healthy but slow), 12 targets;
* ``outage``: 100 ms, but 503 without Retry-After for 20 s (from 10 s), 40 targets;
* ``degraded``: 200 ms a request, beside other users' load (half its
  capacity); from 20 s to 50 s its capacity drops to 0.4, under that load:
  the backlog, and latency with it, grows until it answers 503 (past 3 s of
  backlog), then drains once capacity is back; 45 targets;
* ``broken``: answers only 500, 6 targets.

Each crawler gets a fresh origin and crawls the same list (hosts
interleaved, as lists usually are): ``walsh`` (the ``targets`` spider with
the add-on and nothing else) and ``autothrottle`` (stock Scrapy serial,
``DOWNLOAD_DELAY=1``, robots.txt obeyed, AutoThrottle on with target
concurrency 1). From what the origin logged, per crawler and host: requests,
pages fetched, the share of time the host spent serving the crawler (the
service time of its requests over the span from the crawler's first request
to the host to its last answer), 5xx answered after the host's first 5xx
(the first distress signal), requests inside the outage or degraded phase,
the time from the heal to the host's normal pace (the first request after
which every gap is within 10 % of its median gap before the phase, at least
1 s), and for the healthy hosts the wall time against the polite lower bound
(their requests at one a second).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).parent
SCRAPY = str(Path(sys.executable).parent / "scrapy")

#: host name -> (address, targets, capacity model)
FULL = {
    "healthy-1": ("127.0.0.2", 40, {"service": 0.1}),
    "healthy-2": ("127.0.0.3", 40, {"service": 0.1}),
    "healthy-3": ("127.0.0.4", 40, {"service": 0.1}),
    "slow": ("127.0.0.5", 12, {"service": 1.5}),
    "outage": ("127.0.0.6", 40, {"service": 0.1, "outage": [10, 30]}),
    "degraded": (
        "127.0.0.7", 45,
        {"service": 0.2, "background": 0.5, "degraded": [20, 50, 0.4], "threshold": 3.0},
    ),
    "broken": ("127.0.0.8", 6, {"service": 0.1, "status": 500}),
}  # fmt: skip
QUICK = {
    "healthy-1": ("127.0.0.2", 12, {"service": 0.1}),
    "slow": ("127.0.0.3", 4, {"service": 0.5}),
    "outage": ("127.0.0.4", 14, {"service": 0.1, "outage": [3, 7]}),
    "broken": ("127.0.0.5", 4, {"service": 0.1, "status": 500}),
    "degraded": (
        "127.0.0.6", 12,
        {"service": 0.2, "background": 0.5, "degraded": [5, 15, 0.3], "threshold": 3.0},
    ),
}  # fmt: skip
FLOOR_S = 1.0

AUTOTHROTTLE = [
    "-s", "AUTOTHROTTLE_ENABLED=True", "-s", "AUTOTHROTTLE_TARGET_CONCURRENCY=1",
    "-s", "DOWNLOAD_DELAY=1",
]  # fmt: skip


def url_list(layout: dict, port: int) -> list[str]:
    """Every host's targets, interleaved."""
    per_host = [[f"http://{addr}:{port}/p/{i}" for i in range(n)] for addr, n, _ in layout.values()]
    return [u for group in itertools.zip_longest(*per_host) for u in group if u]


def crawl_command(crawler: str, urls: Path, port: int, tmp: Path) -> list[str]:
    if crawler == "autothrottle":
        return [
            SCRAPY, "runspider", str(HERE / "baseline_spider.py"), "-a", f"list={urls}",
            *AUTOTHROTTLE,
        ]  # fmt: skip
    base = f"http://127.0.0.1:{port}/.well-known/walsh-research"
    return [
        SCRAPY, "runspider", str(HERE / "walsh_spider.py"), "-a", f"list={urls}",
        "-s", f"WALSH_BLOCKLIST_URL={base}/blocklist.json",
        "-s", f"WALSH_BLOCKLIST_SCHEMA_URL={base}/blocklist.schema.json",
        "-s", "WALSH_BLOCKLIST_ALLOW_HTTP=True",
        "-s", f"WALSH_STATE_DIR={tmp / 'state'}",
        "-s", "WALSH_RUN_INTERVAL=0",
        "-s", "WALSH_LLMS_PROBE=False",
    ]  # fmt: skip


def measure(crawler: str, layout: dict, port: int, timeout: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"adaptive-{crawler}-"))
    urls = tmp / "urls.txt"
    urls.write_text("\n".join(url_list(layout, port)) + "\n")
    model = tmp / "model.json"
    model.write_text(json.dumps({addr: spec for addr, _, spec in layout.values()}))
    log = tmp / "hits.json"
    origin = subprocess.Popen(
        [sys.executable, str(HERE / "multihost_origin.py"), "--hosts", str(len(layout)),
         "--port", str(port), "--log", str(log), "--model", str(model),
         "--max-seconds", str(timeout + 30)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert origin.stdout is not None and origin.stdout.readline().strip() == "ready"
    started = time.monotonic()
    with open(tmp / "crawl.err", "w") as err:
        rc = subprocess.run(
            crawl_command(crawler, urls, port, tmp), stdout=subprocess.DEVNULL, stderr=err,
            timeout=timeout, check=False, cwd=tmp,
        ).returncode  # fmt: skip
    process_wall = time.monotonic() - started
    origin.terminate()
    origin.wait()
    data = json.loads(log.read_text())
    return {"crawler": crawler, "rc": rc, "process_wall_s": round(process_wall, 2),
            **judge(layout, data)}  # fmt: skip


def judge(layout: dict, data: dict) -> dict:
    """The figures, from what the origin logged."""
    began = data["began"]
    by_addr: dict[str, list[dict]] = defaultdict(list)
    for h in data["hits"]:
        by_addr[h["host"]].append(h)
    hosts = {}
    healthy_end, healthy_bound = 0.0, 0.0
    for name, (addr, n, spec) in layout.items():
        hits = sorted(by_addr.get(addr, []), key=lambda h: h["start"])
        pages = [h for h in hits if h["path"] != "/robots.txt"]
        starts = [h["start"] - began for h in hits]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        errors = [h for h in pages if h.get("status", 200) >= 500]
        first_signal = errors[0]["start"] if errors else None
        span = (max(h.get("end", h["start"]) for h in hits) - hits[0]["start"]) if hits else 0.0
        row = {
            "targets": n,
            "requests": len(hits),
            "pages_fetched": len({h["path"] for h in pages if h.get("status") == 200}),
            "busy_share": round(data["busy"].get(addr, 0.0) / span, 3) if span else 0.0,
            "errors": len(errors),
            "5xx_after_first_signal": sum(h["start"] > first_signal for h in errors)
            if first_signal is not None
            else 0,
            "median_gap_s": round(statistics.median(gaps), 2) if gaps else None,
            "min_gap_s": round(min(gaps), 3) if gaps else None,
        }
        phase = spec.get("outage") or spec.get("degraded")
        if phase:
            row["requests_in_phase"] = sum(phase[0] <= t < phase[1] for t in starts)
            # healed: the outage is over, or the degraded host answers again
            healed = (
                phase[1]
                if spec.get("outage")
                else max([phase[1], *(h["start"] - began for h in errors)])
            )
            before = [b - a for a, b in itertools.pairwise(t for t in starts if t < phase[0])]
            normal = max(FLOOR_S, statistics.median(before[1:] or [FLOOR_S]))
            row["normal_gap_s"] = round(normal, 2)
            row["heal_to_normal_s"] = heal_to_normal(starts, healed, normal)
        if name.startswith("healthy"):
            end = max(h.get("end", h["start"]) for h in hits) - began if hits else 0.0
            bound = (len(hits) - 1) * FLOOR_S + spec["service"]
            row["wall_s"], row["bound_s"] = round(end, 2), round(bound, 2)
            healthy_end, healthy_bound = max(healthy_end, end), max(healthy_bound, bound)
        hosts[name] = row
    last = max(h.get("end", h["start"]) for h in data["hits"] if h["host"] != "127.0.0.1")
    return {
        "hosts": hosts,
        "crawl_wall_s": round(last - began, 2),
        "healthy_wall_s": round(healthy_end, 2),
        "healthy_bound_s": round(healthy_bound, 2),
        "healthy_ratio": round(healthy_end / healthy_bound, 3) if healthy_bound else None,
    }


def heal_to_normal(starts: list[float], healed: float, normal: float) -> float | None:
    """Seconds from *healed* to the first request after which every gap to
    the host is back at its pace before the phase (*normal*, at least the
    floor), give or take 10 % (None: it never got back there)."""
    after = [t for t in starts if t >= healed]
    for i, t in enumerate(after):
        rest = after[i:]
        if len(rest) >= 3 and all(b - a < 1.1 * normal for a, b in itertools.pairwise(rest)):
            return round(t - healed, 1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="a small layout, for a smoke run")
    ap.add_argument("--port", type=int, default=18090)
    ap.add_argument("--timeout", type=float, default=1500)
    ap.add_argument("--crawlers", default="walsh,autothrottle")
    a = ap.parse_args()
    layout = QUICK if a.quick else FULL
    results = []
    for crawler in a.crawlers.split(","):
        r = measure(crawler, layout, a.port, a.timeout)
        results.append(r)
        print(json.dumps(r), flush=True)
    print_table(layout, results)
    return 0


def print_table(layout: dict, results: list[dict]) -> None:
    def fmt(v: object) -> str:
        if v is None:
            return "never"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.0f}"
        return str(v)

    head = (
        f"{'crawler':<13} {'host':<10} {'pages':>7} {'requests':>8} {'busy':>6} "
        f"{'5xx after 1st':>13} {'in phase':>8} {'heal->normal s':>14} {'median gap s':>12}"
    )
    print(f"\n{head}\n{'-' * len(head)}")
    for r in results:
        for name, h in r["hosts"].items():
            print(
                f"{r['crawler']:<13} {name:<10} {h['pages_fetched']:>3}/{h['targets']:<3} "
                f"{h['requests']:>8} {100 * h['busy_share']:>5.1f}% "
                f"{h['5xx_after_first_signal']:>13} {fmt(h.get('requests_in_phase', '-')):>8} "
                f"{fmt(h['heal_to_normal_s']) if 'heal_to_normal_s' in h else '-':>14} "
                f"{fmt(h['median_gap_s']):>12}"
            )
    print()
    for r in results:
        print(
            f"{r['crawler']:<13} healthy hosts done at {r['healthy_wall_s']:.1f} s, polite lower "
            f"bound {r['healthy_bound_s']:.1f} s: {r['healthy_ratio']:.3f}x; whole crawl "
            f"{r['crawl_wall_s']:.1f} s (process {r['process_wall_s']:.1f} s, exit {r['rc']})"
        )


if __name__ == "__main__":
    sys.exit(main())
