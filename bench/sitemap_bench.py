"""Sitemap benchmark: a re-run of a list where 90 % of the targets did not
change, on hosts with a Crawl-delay, with the sitemap gate and without it
(today's re-run: a conditional GET for every due target).

    .venv/bin/python bench/sitemap_bench.py            # 4 hosts x 40 targets, Crawl-delay 2 (about 5 min)
    .venv/bin/python bench/sitemap_bench.py --quick    # 2 hosts x 20 targets, Crawl-delay 1 (about 1 min)

A loopback origin (this script, ``--serve``) answers on 127.0.0.2 ..
127.0.0.(H+1), one host per address: a robots.txt with ``Crawl-delay`` and
a ``Sitemap:`` line, a sitemap giving each page's ``<lastmod>``, and pages
with an ``ETag`` that answer 304 to a matching ``If-None-Match`` (the
sitemap too). 127.0.0.1 serves an empty blocklist and its schema.

For each mode, with a fresh state directory: run 1 fetches the whole list;
then a tenth of the pages of each host change (new ETag, ``<lastmod>`` now);
run 2 is measured from what the origin saw: requests by kind, 200 and 304
answers, and wall time (first arrival to last answer). ``sitemaps`` is the
targets spider with the add-on; ``conditional`` is the same with
``WALSH_SITEMAPS=False``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import scrapy_walsh_research

HERE = Path(__file__).parent
SCRAPY = str(Path(sys.executable).parent / "scrapy")
SCHEMA = (
    Path(scrapy_walsh_research.__file__).parent / "core/blocklist/blocklist.schema.json"
).read_text()
BLOCKLIST = json.dumps({
    "contract": "walsh-research-blocklist/v1", "updated": "2026-05-23T00:00:00Z",
    "operator": "Bench", "policy": "https://wal.sh/bot/", "refresh": "PT6H", "blocked": [],
})  # fmt: skip
SHAPES = {
    "full": {"hosts": 4, "pages": 40, "delay": 2.0},
    "quick": {"hosts": 2, "pages": 20, "delay": 1.0},
}
#: when the unchanged pages last changed: well before run 1
OLD = "2026-01-01T00:00:00Z"


def serve(a: argparse.Namespace) -> int:
    """The origin: pages and sitemaps from the --state file, the log to --log."""
    from twisted.internet import reactor
    from twisted.web import resource, server

    state = json.loads(Path(a.state).read_text())
    log: list[dict] = []
    started = time.monotonic()

    class Host(resource.Resource):
        isLeaf = True

        def __init__(self, address: str) -> None:
            super().__init__()
            self.address = address

        def render_GET(self, request):
            t = time.monotonic() - started
            path = request.path.decode()
            base = f"http://{self.address}:{a.port}"
            pages = state["hosts"].get(self.address, {})
            status, body, ctype, etag = 200, b"", "text/plain", None
            if self.address == "127.0.0.1":
                if path.endswith("blocklist.json"):
                    body, ctype = BLOCKLIST.encode(), "application/json"
                elif path.endswith("blocklist.schema.json"):
                    body, ctype = SCHEMA.encode(), "application/schema+json"
                else:
                    status = 404
            elif path == "/robots.txt":
                body = (
                    f"User-agent: *\nAllow: /\nCrawl-delay: {a.delay:g}\n"
                    f"Sitemap: {base}/sitemap.xml\n"
                ).encode()
            elif path == "/sitemap.xml":
                urls = "".join(
                    f"<url><loc>{base}/p/{p}</loc><lastmod>{v['lastmod']}</lastmod></url>"
                    for p, v in pages.items()
                )
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>'
                    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    f"{urls}</urlset>"
                ).encode()
                ctype = "application/xml"
                etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            elif path.startswith("/p/") and path[3:] in pages:
                page = pages[path[3:]]
                etag = f'"v{page["version"]}"'
                body = f"# page {path[3:]}, version {page['version']}\n".encode()
                ctype = "text/markdown"
            else:
                status = 404
            if etag is not None:
                request.setHeader("ETag", etag)
                if request.getHeader("If-None-Match") == etag:
                    status, body = 304, b""
            request.setResponseCode(status)
            request.setHeader("Content-Type", ctype)
            log.append({
                "t": t, "end": time.monotonic() - started, "host": self.address, "path": path,
                "status": status, "conditional": request.getHeader("If-None-Match") is not None,
            })  # fmt: skip
            return body

    for i in range(1, a.hosts + 2):
        address = f"127.0.0.{i}"
        reactor.listenTCP(a.port, server.Site(Host(address)), interface=address)

    def dump() -> None:
        Path(a.log).write_text(json.dumps(log))
        if reactor.running:
            reactor.stop()

    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(dump))
    reactor.callLater(a.timeout + 30, dump)
    print("ready", flush=True)
    reactor.run(installSignalHandlers=False)
    return 0


def layout(hosts: int, pages: int) -> dict:
    return {
        "hosts": {
            f"127.0.0.{h + 2}": {str(p): {"version": 1, "lastmod": OLD} for p in range(pages)}
            for h in range(hosts)
        }
    }


def change(state: dict, share: float) -> int:
    """A *share* of each host's pages change now: a new version, lastmod now."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    changed = 0
    for pages in state["hosts"].values():
        every = max(1, round(1 / share))
        for p, page in pages.items():
            if int(p) % every == 0:
                page["version"] += 1
                page["lastmod"] = now
                changed += 1
    return changed


def run(a: argparse.Namespace, tmp: Path, state: dict, tag: str, extra: list[str]) -> list[dict]:
    """One crawl of the list against a fresh origin serving *state*; the origin's log."""
    state_file, log = tmp / f"{tag}.state.json", tmp / f"{tag}.log.json"
    state_file.write_text(json.dumps(state))
    origin = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--state", str(state_file), "--log", str(log),
         "--port", str(a.port), "--hosts", str(a.hosts), "--delay", str(a.delay),
         "--timeout", str(a.timeout)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert origin.stdout is not None and origin.stdout.readline().strip() == "ready"
    urls = tmp / "urls.txt"
    urls.write_text(
        "".join(
            f"http://{host}:{a.port}/p/{p}\n"
            for p in range(a.pages)
            for host in state["hosts"]
        )
    )
    base = f"http://127.0.0.1:{a.port}/.well-known/walsh-research"
    try:
        subprocess.run(
            [SCRAPY, "runspider", str(HERE / "walsh_spider.py"), "-a", f"list={urls}",
             "-s", f"WALSH_BLOCKLIST_URL={base}/blocklist.json",
             "-s", f"WALSH_BLOCKLIST_SCHEMA_URL={base}/blocklist.schema.json",
             "-s", "WALSH_BLOCKLIST_ALLOW_HTTP=True", "-s", "WALSH_RUN_INTERVAL=0",
             "-s", f"WALSH_STATE_DIR={tmp / 'state'}", "-o", str(tmp / f"{tag}.jsonl"), *extra],
            check=True, timeout=a.timeout, cwd=tmp, capture_output=not a.verbose,
        )  # fmt: skip
    finally:
        origin.send_signal(signal.SIGTERM)
        origin.wait(timeout=30)
    return json.loads(log.read_text())


def figures(hits: list[dict]) -> dict:
    hits = [h for h in hits if h["host"] != "127.0.0.1"]
    pages = [h for h in hits if h["path"].startswith("/p/")]
    return {
        "requests": len(hits),
        "pages": len(pages),
        "page 200": sum(h["status"] == 200 for h in pages),
        "page 304": sum(h["status"] == 304 for h in pages),
        "sitemaps": sum(h["path"] == "/sitemap.xml" for h in hits),
        "robots": sum(h["path"] == "/robots.txt" for h in hits),
        "wall s": round(max(h["end"] for h in hits) - min(h["t"] for h in hits), 1) if hits else 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--state", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="2 hosts x 20 targets, Crawl-delay 1")
    ap.add_argument("--hosts", type=int)
    ap.add_argument("--pages", type=int)
    ap.add_argument("--delay", type=float)
    ap.add_argument("--changed", type=float, default=0.1, help="share of pages changed (0.1)")
    ap.add_argument("--port", type=int, default=18190)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--verbose", action="store_true", help="show the crawls' logs")
    a = ap.parse_args()
    if a.serve:
        return serve(a)
    shape = SHAPES["quick" if a.quick else "full"]
    a.hosts = a.hosts or shape["hosts"]
    a.pages = a.pages or shape["pages"]
    a.delay = a.delay or shape["delay"]
    print(
        f"{a.hosts} hosts x {a.pages} targets, Crawl-delay {a.delay:g} s, "
        f"{a.changed:.0%} of pages changed between runs; uptime: "
        + subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    )
    results = {}
    for mode, extra in (("conditional", ["-s", "WALSH_SITEMAPS=False"]), ("sitemaps", [])):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            state = layout(a.hosts, a.pages)
            run(a, tmp, state, "run1", extra)
            changed = change(state, a.changed)
            time.sleep(2)  # the change's lastmod is after run 1's fetches
            results[mode] = figures(run(a, tmp, state, "run2", extra))
            results[mode]["changed"] = changed
    keys = ["requests", "pages", "page 200", "page 304", "sitemaps", "robots", "wall s"]
    print(f"{'re-run':<12}" + "".join(f"{k:>10}" for k in keys))
    for mode, r in results.items():
        print(f"{mode:<12}" + "".join(f"{r[k]:>10}" for k in keys))
    c, s = results["conditional"], results["sitemaps"]
    print(
        f"sitemaps: {s['requests'] / c['requests']:.2f}x the requests, "
        f"{s['wall s'] / c['wall s']:.2f}x the wall time of the conditional re-run "
        f"({s['changed']} pages changed)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
