"""Reactor stalls: a crawl during which a 10^6-entry
blocklist is fetched, validated and adopted (at start and again at each
refresh) and every host's robots.txt is 500 KiB, with a lag monitor in the
crawl process (``lag_monitor.py``: a call every 10 ms; any lag over 50 ms is
a stall). Then blocklist lookup cost at 10^2 and 10^6 entries.

    .venv/bin/python bench/stall_bench.py                    # 10^6 entries, 500 KiB robots.txt
    .venv/bin/python bench/stall_bench.py --entries 100000   # smaller
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
SCRAPY = str(Path(sys.executable).parent / "scrapy")


def crawl(a: argparse.Namespace, work: Path) -> dict:
    log, lag = work / "hits.json", work / "lag.json"
    origin = subprocess.Popen(
        [sys.executable, str(HERE / "multihost_origin.py"), "--hosts", str(a.hosts),
         "--port", str(a.port), "--latency", "0.005", "--log", str(log),
         "--blocklist-entries", str(a.entries), "--blocklist-refresh", f"PT{a.refresh}S",
         "--robots-bytes", str(a.robots_bytes), "--max-seconds", "1800",
         *(["--blocklist-vary"] if a.vary else [])],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert origin.stdout is not None and origin.stdout.readline().strip() == "ready"
    urls = work / "urls.txt"
    urls.write_text(
        "".join(
            f"http://127.0.0.{h + 2}:{a.port}/p/{p}\n"
            for p in range(a.pages)
            for h in range(a.hosts)
        )
    )
    base = f"http://127.0.0.1:{a.port}/.well-known/walsh-research"
    command = [
        SCRAPY, "runspider", str(HERE / "walsh_spider.py"), "-a", f"list={urls}",
        "-s", f"WALSH_BLOCKLIST_URL={base}/blocklist.json",
        "-s", f"WALSH_BLOCKLIST_SCHEMA_URL={base}/blocklist.schema.json",
        "-s", "WALSH_BLOCKLIST_ALLOW_HTTP=True",
        "-s", f"WALSH_BLOCKLIST_MIN_REFRESH={a.refresh}",
        "-s", f"WALSH_BLOCKLIST_MAX_BYTES={256 * 2**20}",
        "-s", f"WALSH_STATE_DIR={work / 'state'}",
        "-s", 'EXTENSIONS={"lag_monitor.LagMonitor": 0}',
        "-s", f"BENCH_LAG_FILE={lag}",
        "-s", "LOG_LEVEL=INFO",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    started = time.monotonic()
    with open(work / "crawl.err", "w") as err:
        rc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=err, cwd=work, env=env,
                            timeout=1800, check=False).returncode  # fmt: skip
    wall = time.monotonic() - started
    origin.terminate()
    origin.wait()
    hits = json.loads(log.read_text())["hits"]
    text = (work / "crawl.err").read_text(errors="replace")
    return {
        "rc": rc, "wall_s": round(wall, 1), "entries": a.entries,
        "blocklist_fetches": sum(1 for h in hits if h["path"].endswith("blocklist.json")),
        "robots_bytes": a.robots_bytes,
        "robots_fetches": sum(1 for h in hits if h["path"] == "/robots.txt"),
        "pages": sum(1 for h in hits if h["path"].startswith("/p/")),
        "changed_each_refresh": a.vary,
        "adopted": text.count("Blocklist adopted"),
        **json.loads(lag.read_text()),
    }  # fmt: skip


def lookups() -> dict:
    """Blocklist lookup cost (µs per host) at 10^2 and 10^6 entries, each
    held as the crawl holds it: a small list in memory, a large one (past
    INLINE_PARSE_BYTES) in the index file its child process wrote."""
    from scrapy_walsh_research.core.blocklist.entries import DomainSet
    from scrapy_walsh_research.core.blocklist.index import IndexFile, write_index

    out = {}
    hosts = [f"www.site{i}.example.com" for i in range(20000)]
    for n in (100, 1_000_000):
        entries = [{"domain": f"d{i}.blocked-{i % 97}.example"} for i in range(n)]
        domains = DomainSet.from_entries(entries, source="bench")
        if n > 1000:
            path = tempfile.mktemp(prefix="walsh-bench-index-")
            write_index(domains.entries, path)
            domains = DomainSet.from_index(IndexFile(path))
            os.unlink(path)
        started = time.perf_counter()
        for host in hosts:
            domains.match(host)
        out[n] = (time.perf_counter() - started) / len(hosts) * 1e6
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--robots-bytes", type=int, default=500 * 1024)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--pages", type=int, default=30)
    ap.add_argument("--refresh", type=int, default=30, help="blocklist refresh, seconds")
    ap.add_argument(
        "--vary", action="store_true", help="each refresh brings a changed list (read in full)"
    )
    ap.add_argument("--port", type=int, default=18085)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="walsh-stall-"))
    r = crawl(a, work)
    r["lookup_us"] = {str(k): round(v, 2) for k, v in lookups().items()}
    print(json.dumps(r), flush=True)
    print(
        f"\nstalls: {len(r['stalls'])} over 50 ms, worst {r['worst_s'] * 1000:.0f} ms "
        f"({r['ticks']} ticks) in a {r['wall_s']} s crawl of {r['pages']} pages; blocklist of "
        f"{r['entries']} entries fetched {r['blocklist_fetches']}x, adopted {r['adopted']}x; "
        f"{r['robots_fetches']} robots.txt of {r['robots_bytes']} bytes"
    )
    print(
        "worst stalls (at s, lag s, on CPU s, runnable but not run by the OS s): "
        f"{sorted(r['stalls'], key=lambda s: -s[1])[:8]}"
    )
    ours = [s for s in r["stalls"] if s[1] - s[3] > 0.050]
    print(f"stalls still over 50 ms without the OS's run-queue wait: {len(ours)}: {ours[:8]}")
    lk = r["lookup_us"]
    print(
        f"blocklist lookup: {lk['100']} us at 10^2 entries, {lk['1000000']} us at 10^6 "
        f"({float(lk['1000000']) / float(lk['100']):.2f}x)"
    )
    print(f"work directory: {work}")
    return 0 if r["rc"] == 0 and not r["stalls"] else 1


if __name__ == "__main__":
    sys.exit(main())
