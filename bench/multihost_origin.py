"""Loopback multi-host origin for politeness/throughput measurements.

One HTTP listener per address 127.0.0.2 .. 127.0.0.(H+1) on the same port:
each address is a distinct host to a crawler. Every request is logged
(monotonic arrival and end, host, path, User-Agent) and answered after a
fixed latency. On SIGTERM/SIGINT, or after --max-seconds, it writes the log
as JSON to --log and exits. 127.0.0.1 serves an empty, valid blocklist and
the schema (kept out of the figures).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from twisted.internet import reactor
from twisted.web import resource, server

SCHEMA = (
    Path(__file__).parent.parent / "scrapy_walsh_research/schemas/blocklist.schema.json"
).read_text()
BLOCKLIST = {
    "contract": "walsh-research-blocklist/v1",
    "updated": "2026-05-23T00:00:00Z",
    "operator": "Bench",
    "policy": "https://wal.sh/bot/",
    "refresh": "PT6H",
    "blocked": [],
}


class Origin(resource.Resource):
    isLeaf = True

    def __init__(self, state: dict, latency: float, crawl_delay: float) -> None:
        super().__init__()
        self.state, self.latency, self.crawl_delay = state, latency, crawl_delay

    def render_GET(self, request):
        st = self.state
        host = request.getHost().host
        path = request.path.decode("latin-1")
        entry = {
            "host": host,
            "path": path,
            "ua": request.getHeader("user-agent") or "",
            "worker": request.getHeader("x-bench-worker") or "",
            "signed": request.getHeader("signature") is not None,
            "start": time.monotonic(),
        }
        st["hits"].append(entry)
        st["inflight"] += 1
        st["max_inflight"] = max(st["max_inflight"], st["inflight"])

        def finish() -> None:
            st["inflight"] -= 1
            entry["end"] = time.monotonic()
            if host == "127.0.0.1" and path.endswith("blocklist.json"):
                body = json.dumps(BLOCKLIST)
            elif host == "127.0.0.1" and path.endswith("blocklist.schema.json"):
                body = SCHEMA
            elif path == "/robots.txt":
                body = "User-agent: *\nAllow: /\n" + (
                    f"Crawl-delay: {self.crawl_delay}\n" if self.crawl_delay else ""
                )
            else:
                body = f"page {path} on {host}\n"
            request.setHeader(b"content-type", b"text/plain")
            request.write(body.encode())
            request.finish()

        reactor.callLater(self.latency, finish)
        return server.NOT_DONE_YET


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--crawl-delay", type=float, default=0)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=float, default=900)
    a = ap.parse_args()
    state = {"hits": [], "inflight": 0, "max_inflight": 0}
    site = server.Site(Origin(state, a.latency, a.crawl_delay))
    site.noisy = False
    for i in range(-1, a.hosts):
        reactor.listenTCP(a.port, site, interface=f"127.0.0.{i + 2}")

    def dump(*_: object) -> None:
        with open(a.log, "w") as f:
            json.dump({"max_inflight": state["max_inflight"], "hits": state["hits"]}, f)
        if reactor.running:
            reactor.stop()

    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(dump))
    signal.signal(signal.SIGINT, lambda *_: reactor.callFromThread(dump))
    reactor.callLater(a.max_seconds, dump)
    print("ready", flush=True)
    reactor.run(installSignalHandlers=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
