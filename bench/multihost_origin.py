"""Loopback multi-host origin for politeness/throughput measurements.

One HTTP listener per address 127.0.0.2 .. 127.0.0.(H+1) on the same port:
each address is a distinct host to a crawler. Every request is logged
(monotonic arrival and end, host, path, User-Agent, status) and answered
after a fixed latency, or, with ``--model FILE``, by a capacity model per
host (:class:`CapacityModel`: each request costs service time, latency grows
with the backlog, past a threshold it answers 503 without Retry-After,
phases where capacity drops or the host is down, or a host that answers
only errors). On SIGTERM/SIGINT, or after --max-seconds, it writes the log
as JSON to --log and exits. 127.0.0.1 serves an empty, valid blocklist and
the schema (kept out of the figures).

With ``--validators`` every page has an ETag and a Last-Modified (the same at
every request) and answers a request that sends its ETag with a 304; with
``--feed-entries K`` a path ending in ``.xml`` is an RSS feed of K entries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

from twisted.internet import reactor
from twisted.web import resource, server

SCHEMA = (
    Path(__file__).parent.parent / "scrapy_walsh_research/core/blocklist/blocklist.schema.json"
).read_text()
BLOCKLIST = {
    "contract": "walsh-research-blocklist/v1",
    "updated": "2026-05-23T00:00:00Z",
    "operator": "Bench",
    "policy": "https://wal.sh/bot/",
    "refresh": "PT6H",
    "blocked": [],
}


def big_blocklist(entries: int, refresh: str) -> bytes:
    """A list of *entries* hosts none of the crawl's targets is under."""
    blocked = [
        {"domain": f"d{i}.blocked-{i % 97}.example", "added": "2026-01-01", "reason": "opt-out"}
        for i in range(entries)
    ]
    return json.dumps({**BLOCKLIST, "refresh": refresh, "blocked": blocked}).encode()


class CapacityModel:
    """One host as a server with finite capacity, shared with other users.

    Work drains at ``capacity`` work-seconds per second (1.0: the host's full
    speed; a ``degraded`` phase ``[start, end, capacity]`` lowers it, then it
    heals) and arrives from other users at ``background`` work-seconds per
    second and from the crawler at ``service`` seconds per request. A request
    is answered when the backlog ahead of it, itself included, has drained
    (FIFO): latency = backlog / capacity, so it grows with the backlog. When
    that would exceed ``threshold`` seconds the host answers 503 without
    Retry-After at once (shedding load). During ``outage`` ``[start, end]``
    every request gets 503 without Retry-After; with ``status`` set, every
    request gets that (a host that answers only errors). Times are seconds
    from the crawl's first request to any host. ``busy`` accumulates the
    time the host spent serving the crawler's requests (service / capacity).
    """

    def __init__(self, spec: dict) -> None:
        self.service = float(spec.get("service", 0.1))
        self.capacity = float(spec.get("capacity", 1.0))
        self.background = float(spec.get("background", 0.0))
        self.threshold = float(spec.get("threshold", 1e9))
        self.degraded = spec.get("degraded")
        self.outage = spec.get("outage")
        self.status = spec.get("status")
        self.backlog = 0.0
        self.busy = 0.0
        self._at: float | None = None

    def capacity_at(self, t: float) -> float:
        d = self.degraded
        return float(d[2]) if d and d[0] <= t < d[1] else self.capacity

    def _drain(self, t: float) -> None:
        """Advance the backlog to *t*, phase by phase."""
        at = self._at if self._at is not None else t
        edges = sorted(e for e in (self.degraded or [])[:2] if at < e < t)
        for end in [*edges, t]:
            net = self.capacity_at(at) - self.background
            self.backlog = max(0.0, self.backlog - net * (end - at))
            at = end
        self._at = t

    def answer(self, t: float) -> tuple[int, float]:
        """(status, seconds until the answer) for a request arriving at *t*."""
        self._drain(t)
        if self.status:
            return int(self.status), 0.0
        o = self.outage
        if o and o[0] <= t < o[1]:
            return 503, 0.0
        c = self.capacity_at(t)
        if (self.backlog + self.service) / c > self.threshold:
            return 503, 0.0
        self.backlog += self.service
        self.busy += self.service / c
        return 200, self.backlog / c


class Origin(resource.Resource):
    isLeaf = True

    def __init__(
        self, state: dict, latency: float, crawl_delay: float,
        blocklist: bytes | None = None, robots_bytes: int = 0,
        validators: bool = False, feed_entries: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.validators, self.feed_entries = validators, feed_entries
        self.state, self.latency, self.crawl_delay = state, latency, crawl_delay
        self.blocklist = blocklist or json.dumps(BLOCKLIST).encode()
        #: with --blocklist-vary, every fetch gets a document that differs from
        #: the one before (a new "updated"), so each is read in full
        self.variants: list[bytes] = []
        self.fetches = 0
        self.robots_bytes = robots_bytes
        #: with --model: each host's capacity model, and when the crawl began
        self.models: dict[str, CapacityModel] = {}
        self.began: float | None = None

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
        status, latency = 200, self.latency
        model = self.models.get(host)
        if model is not None and host != "127.0.0.1":
            if self.began is None:
                self.began = entry["start"]
                st["began"] = self.began
            if path != "/robots.txt":  # robots.txt is cheap and always there
                status, latency = model.answer(entry["start"] - self.began)
        entry["status"] = status

        def finish() -> None:
            st["inflight"] -= 1
            entry["end"] = time.monotonic()
            if status != 200:
                request.setResponseCode(status)
                request.setHeader(b"content-type", b"text/plain")
                request.write(b"unavailable\n")
                request.finish()
                return
            if host == "127.0.0.1" and path.endswith("blocklist.json"):
                self.fetches += 1
                variants = self.variants or [self.blocklist]
                body = variants[self.fetches % len(variants)].decode()
            elif host == "127.0.0.1" and path.endswith("blocklist.schema.json"):
                body = SCHEMA
            elif path == "/robots.txt":
                body = "User-agent: *\nAllow: /\n" + (
                    f"Crawl-delay: {self.crawl_delay}\n" if self.crawl_delay else ""
                )
                # a large robots.txt: many rules that match none of the pages
                line = f"Disallow: /private/{host}/" + "x" * 40 + "/\n"
                body += line * (self.robots_bytes // len(line))
            else:
                body = f"page {path} on {host}\n"
            kind = b"text/plain"
            if host != "127.0.0.1" and path != "/robots.txt":
                if self.feed_entries and path.endswith(".xml"):
                    kind, body = b"application/rss+xml", self.feed(host, path)
                if self.validators:
                    etag = '"' + hashlib.sha1(f"{host}{path}".encode()).hexdigest()[:16] + '"'
                    request.setHeader(b"etag", etag.encode())
                    request.setHeader(b"last-modified", b"Sat, 02 May 2026 10:00:00 GMT")
                    if request.getHeader("if-none-match") == etag:
                        entry["status"] = 304
                        request.setResponseCode(304)
                        request.finish()
                        return
            request.setHeader(b"content-type", kind)
            request.write(body.encode())
            request.finish()

        reactor.callLater(latency, finish)
        return server.NOT_DONE_YET


    def feed(self, host: str, path: str) -> str:
        """An RSS feed of ``feed_entries`` entries, the same at every request."""
        items = "".join(
            f"<item><guid>http://{host}{path[:-4]}/entry-{i}</guid><title>Entry {i}</title>"
            f"<link>http://{host}{path[:-4]}/entry-{i}</link></item>"
            for i in range(self.feed_entries)
        )
        return (
            '<?xml version="1.0"?><rss version="2.0"><channel><title>Feed</title>'
            f"<link>http://{host}/</link>{items}</channel></rss>"
        )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--port", type=int, default=18080)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--crawl-delay", type=float, default=0)
    ap.add_argument("--log", required=True)
    ap.add_argument("--blocklist-entries", type=int, default=0)
    ap.add_argument("--blocklist-refresh", default="PT6H")
    ap.add_argument("--robots-bytes", type=int, default=0)
    ap.add_argument("--blocklist-vary", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=900)
    ap.add_argument("--validators", action="store_true", help="ETag/Last-Modified, and 304s")
    ap.add_argument("--feed-entries", type=int, default=0, help="*.xml paths: RSS of K entries")
    ap.add_argument(
        "--model", help="JSON file: host address -> CapacityModel spec (service, capacity, "
        "threshold, degraded, outage, status)",
    )  # fmt: skip
    a = ap.parse_args()
    state = {"hits": [], "inflight": 0, "max_inflight": 0}
    blocklist = (
        big_blocklist(a.blocklist_entries, a.blocklist_refresh) if a.blocklist_entries else None
    )
    origin = Origin(state, a.latency, a.crawl_delay, blocklist, a.robots_bytes,
                    a.validators, a.feed_entries)  # fmt: skip
    if a.blocklist_vary and blocklist:
        other = blocklist.replace(
            b'"updated": "2026-05-23T00:00:00Z"', b'"updated": "2026-05-24T00:00:00Z"'
        )
        origin.variants = [blocklist, other]
    if a.model:
        origin.models = {
            host: CapacityModel(spec)
            for host, spec in json.loads(Path(a.model).read_text()).items()
        }
    site = server.Site(origin)
    site.noisy = False
    for i in range(-1, a.hosts):
        reactor.listenTCP(a.port, site, interface=f"127.0.0.{i + 2}")

    def dump(*_: object) -> None:
        busy = {host: model.busy for host, model in origin.models.items()}
        with open(a.log, "w") as f:
            json.dump({"max_inflight": state["max_inflight"], "hits": state["hits"],
                       "began": state.get("began"), "busy": busy}, f)  # fmt: skip
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
