"""Memory at scale: this bundle and stock Scrapy on 10^4 hosts.

    .venv/bin/python bench/scale_bench.py                        # 10^4 hosts x 10 pages
    .venv/bin/python bench/scale_bench.py --hosts 1000           # 10^3 x 10, a quick run
    .venv/bin/python bench/scale_bench.py --crawlers walsh --hosts 200 --pages 5

One origin process (Twisted, one listener on 127.0.0.1) serves every host
``hNNNNN.test`` by its Host header; both crawlers resolve ``*.test`` to
127.0.0.1 with the sandbox's ``SandboxDNSResolver``, so all traffic stays on
loopback. Every host has a robots.txt allowing all; the list interleaves the
hosts (page 0 of every host, then page 1, ...).

For each crawler, run as a child process on the same list: peak RSS
(``ru_maxrss`` from :func:`os.wait4`), RSS sampled over time
(``/proc/PID/status`` VmRSS), CPU seconds, process wall, records written,
and, from the origin: requests, wall (first arrival to last response), the
polite lower bound max(requests x latency, busiest host's (pages - 1) x 1 s),
the minimum same-host gap and the origin's own CPU (it must not be the
bottleneck). Stock Scrapy runs serial with no delay (the floor of memory a
Scrapy crawl of this list needs); the RSS ratio is bundle / stock.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from politeness_bench import UA, crawl_command

RESOLVER = "scrapy_walsh_research.sandbox.origin.SandboxDNSResolver"
OPERATOR = "127.0.0.1"


def host_name(i: int) -> str:
    return f"h{i:05d}.test"


def url_list(hosts: int, pages: int, port: int, order: str = "interleaved") -> list[str]:
    """Interleaved: every host's page 0, then every host's page 1, ...;
    host-major: every page of the first host, then of the second, ..."""
    if order == "host-major":
        return [f"http://{host_name(h)}:{port}/p/{p}" for h in range(hosts) for p in range(pages)]
    return [f"http://{host_name(h)}:{port}/p/{p}" for p in range(pages) for h in range(hosts)]


# -- the origin ---------------------------------------------------------------


def serve(port_file: str, latency: float, log: str) -> int:
    """One Twisted listener for every virtual host; a running summary, not a
    list of hits, so its own memory does not grow with the crawl."""
    from multihost_origin import BLOCKLIST
    from politeness_bench import HERE
    from twisted.internet import reactor
    from twisted.web import resource as web_resource
    from twisted.web import server

    schema = (HERE.parent / "scrapy_walsh_research/core/blocklist/blocklist.schema.json").read_bytes()
    blocklist = json.dumps(BLOCKLIST).encode()
    robots = b"User-agent: *\nAllow: /\n"
    st = {
        "requests": 0, "robots": 0, "pages": 0, "operator": 0, "bad_ua": 0,
        "inflight": 0, "max_inflight": 0, "first": None, "last_end": 0.0,
        "min_gap": None, "gaps": 0, "gaps_under_1s": 0,
    }  # fmt: skip
    last: dict[bytes, tuple[float, bytes]] = {}
    st["under_1s"] = []  # the first few gaps under 1 s: host, paths, gap
    robots_hosts: dict[bytes, int] = {}

    class Origin(web_resource.Resource):
        isLeaf = True

        def render_GET(self, request):
            now = time.monotonic()
            host = (request.getHeader(b"host") or b"").split(b":")[0]
            path = request.path
            st["requests"] += 1
            st["first"] = st["first"] or now
            if host == OPERATOR.encode():
                st["operator"] += 1
                body = schema if path.endswith(b"schema.json") else blocklist
            else:
                if request.getHeader(b"user-agent") != UA.encode():
                    st["bad_ua"] += 1
                prev = last.get(host)
                if prev is not None:
                    gap = now - prev[0]
                    st["gaps"] += 1
                    if gap < 1.0:
                        st["gaps_under_1s"] += 1
                        if len(st["under_1s"]) < 20:
                            st["under_1s"].append(
                                [host.decode(), prev[1].decode(), path.decode(), round(gap, 4)]
                            )
                    if st["min_gap"] is None or gap < st["min_gap"]:
                        st["min_gap"] = gap
                last[host] = (now, path)
                if path == b"/robots.txt":
                    st["robots"] += 1
                    robots_hosts[host] = robots_hosts.get(host, 0) + 1
                    body = robots
                else:
                    st["pages"] += 1
                    body = b"page " + path + b" on " + host + b"\n"
            st["inflight"] += 1
            st["max_inflight"] = max(st["max_inflight"], st["inflight"])

            def finish() -> None:
                st["inflight"] -= 1
                st["last_end"] = time.monotonic()
                if not request.finished and not request._disconnected:
                    request.setHeader(b"content-type", b"text/plain")
                    request.write(body)
                    request.finish()

            reactor.callLater(latency, finish)
            return server.NOT_DONE_YET

    site = server.Site(Origin())
    site.noisy = False
    site.log = lambda request: None  # no access log
    port = reactor.listenTCP(0, site, interface="127.0.0.1")

    def dump(*_: object) -> None:
        use = resource.getrusage(resource.RUSAGE_SELF)
        st["cpu_s"] = round(use.ru_utime + use.ru_stime, 2)
        st["maxrss_mb"] = round(use.ru_maxrss / 1024, 1)
        st["robots_max_per_host"] = max(robots_hosts.values(), default=0)
        st["hosts_seen"] = len(last)
        st["wall_s"] = round(st["last_end"] - (st["first"] or 0), 3) if st["first"] else 0
        Path(log).write_text(json.dumps(st))
        if reactor.running:
            reactor.stop()

    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(dump))
    Path(port_file).write_text(str(port.getHost().port))
    reactor.run(installSignalHandlers=False)
    return 0


# -- the crawls ---------------------------------------------------------------


def run_child(args: list[str], cwd: Path, timeout: float) -> dict:
    """Run *args*; sample its VmRSS every 0.5 s; peak RSS and CPU from wait4."""
    started = time.monotonic()
    with open(cwd / "crawl.err", "w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        status = Path(f"/proc/{proc.pid}/status")
        while not done.wait(0.5):
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        samples.append((time.monotonic() - started, int(line.split()[1])))
            except OSError:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    timer.cancel()
    done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "rc": proc.returncode,
        "process_wall_s": round(time.monotonic() - started, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "rss_samples_mb": [(round(t, 1), round(kb / 1024, 1)) for t, kb in samples],
    }


def measure(crawler: str, hosts: int, pages: int, latency: float, timeout: float,
            extra: list[str], order: str = "interleaved") -> dict:  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix=f"scale-{crawler}-"))
    port_file, log = tmp / "port", tmp / "origin.json"
    origin = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port_file), "--latency", str(latency),
         "--log", str(log)],
    )  # fmt: skip
    while not port_file.exists() or not port_file.read_text():
        time.sleep(0.05)
    port = int(port_file.read_text())
    urls = tmp / "urls.txt"
    urls.write_text("\n".join(url_list(hosts, pages, port, order)) + "\n")
    cmd = crawl_command(crawler, urls, port, tmp)
    records = tmp / "records.jsonl"
    cmd += ["-s", f"TWISTED_DNS_RESOLVER={RESOLVER}", "-o", f"{records}:jsonlines"]
    if crawler == "stock":
        cmd += ["-s", "DOWNLOAD_DELAY=0"]  # serial, no delay: Scrapy's own floor
    else:
        cmd += extra
    result = run_child(cmd, tmp, timeout)
    origin.send_signal(signal.SIGTERM)
    origin.wait()
    seen = json.loads(log.read_text())
    bound = max(seen["requests"] * latency, (pages - 1) * 1.0 + latency)
    count = 0
    if records.exists():
        with open(records, "rb") as f:
            count = sum(1 for _ in f)
    samples = result.pop("rss_samples_mb")
    step = max(1, len(samples) // 20)
    return {
        "crawler": crawler, "hosts": hosts, "pages": pages, "targets": hosts * pages,
        **result, "records": count,
        "origin_requests": seen["requests"], "origin_pages": seen["pages"],
        "origin_robots": seen["robots"], "robots_max_per_host": seen["robots_max_per_host"],
        "crawl_wall_s": seen["wall_s"], "lower_bound_s": round(bound, 2),
        "ratio_to_bound": round(seen["wall_s"] / bound, 2) if bound else None,
        "min_same_host_gap_s": round(seen["min_gap"], 4) if seen["min_gap"] else None,
        "gaps_under_1s": seen["gaps_under_1s"], "under_1s": seen["under_1s"],
        "max_inflight": seen["max_inflight"],
        "bad_ua": seen["bad_ua"], "origin_cpu_s": seen["cpu_s"],
        "origin_peak_rss_mb": seen["maxrss_mb"],
        "rss_over_time_mb": samples[::step] + ([samples[-1]] if samples else []),
        "dir": str(tmp),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pages", type=int, default=10)
    ap.add_argument("--latency", type=float, default=0.001)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--crawlers", default="walsh,stock")
    ap.add_argument("--order", choices=["interleaved", "host-major"], default="interleaved")
    ap.add_argument("-s", dest="settings", action="append", default=[],
                    help="NAME=VALUE for the bundle's crawl (e.g. a cache bound)")  # fmt: skip
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        return serve(a.serve, a.latency, a.log)
    extra = [x for s in a.settings for x in ("-s", s)]
    print(f"load before: {os.getloadavg()}", flush=True)
    results = []
    for crawler in a.crawlers.split(","):
        r = measure(crawler, a.hosts, a.pages, a.latency, a.timeout, extra, a.order)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"load after: {os.getloadavg()}")
    print(f"\n{a.hosts} hosts x {a.pages} pages ({a.order}), latency {a.latency} s, interval 1 s\n")
    head = (f"{'crawler':<8} {'records':>8} {'requests':>8} {'peak MB':>8} {'cpu s':>7} "
            f"{'wall s':>7} {'bound s':>7} {'min gap':>7} {'<1 s':>5} {'inflt':>5} "
            f"{'origin cpu':>10}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for r in results:
        print(
            f"{r['crawler']:<8} {r['records']:>8} {r['origin_requests']:>8} "
            f"{r['peak_rss_mb']:>8.1f} {r['cpu_s']:>7.1f} {r['crawl_wall_s']:>7.1f} "
            f"{r['lower_bound_s']:>7.1f} {r['min_same_host_gap_s'] or 0:>7.3f} "
            f"{r['gaps_under_1s']:>5} {r['max_inflight']:>5} {r['origin_cpu_s']:>10.1f}"
        )
    by = {r["crawler"]: r for r in results}
    if "walsh" in by and "stock" in by:
        ratio = by["walsh"]["peak_rss_mb"] / by["stock"]["peak_rss_mb"]
        print(f"\npeak RSS ratio walsh/stock: {ratio:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
