"""A hostile loopback origin for the soak (``soak.py``): many virtual hosts
(``h<N>.test`` by the Host header, one listener), each with a fault profile
chosen by its number, every request logged with its arrival and end
(monotonic), status and Retry-After. On SIGTERM, or after --max-seconds, the
log is written as JSON to --log.

Profiles (host number mod len(PROFILES)):

- ``ok``: plain pages;
- ``reset``: every third page request is answered with a TCP reset;
- ``closed``: every third page request is read, then the connection closed;
- ``stall``: the first page request is never answered (the crawler's timeout);
- ``slow``: every other body dribbles out, 64 bytes every 30 ms;
- ``truncated``: Content-Length promises more than is sent, then close;
- ``huge-robots``: a 10 MB robots.txt (Crawl-delay 2 at its top);
- ``loop``: pages redirect in a loop (/p/N -> /p/N/a -> /p/N -> ...);
- ``storm-ra``: 429 with Retry-After 2 for the first 3 page requests;
- ``storm-503``: 503 without Retry-After for the first 3 page requests;
- ``robots-503``: robots.txt answers 503 the first time (then 200);
- ``delay``: robots.txt asks for Crawl-delay 1.5.

``operator.test`` serves an empty blocklist and the bundled schema.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.web import resource, server

SCHEMA = (
    Path(__file__).parent.parent / "scrapy_walsh_research/core/blocklist/blocklist.schema.json"
).read_text()
BLOCKLIST = {
    "contract": "walsh-research-blocklist/v1",
    "updated": "2026-11-22T00:00:00Z",
    "operator": "Soak",
    "policy": "https://wal.sh/bot/",
    "refresh": "PT6H",
    "blocked": [],
}
PROFILES = (
    "ok", "reset", "closed", "stall", "slow", "truncated", "huge-robots", "loop",
    "storm-ra", "storm-503", "robots-503", "delay",
)  # fmt: skip
HUGE = ("User-agent: *\nCrawl-delay: 2\n" + "Disallow: /nothing-here-" + "x" * 60 + "\n") * (
    10 * 1024 * 1024 // 90
)


def profile(host: str) -> str:
    try:
        return PROFILES[int(host.split(".")[0][1:]) % len(PROFILES)]
    except ValueError:
        return "ok"


def crawl_delay(host: str) -> float:
    """What the host's robots.txt asks for (the soak's interval check)."""
    return {"huge-robots": 2.0, "delay": 1.5}.get(profile(host), 0.0)


class Origin(resource.Resource):
    isLeaf = True

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__()
        self.state = state
        self.count: dict[tuple[str, str], int] = {}

    def render_GET(self, request: Any) -> Any:
        host = (request.getHeader("host") or "").split(":")[0].lower()
        path = request.path.decode("latin-1")
        entry: dict[str, Any] = {
            "host": host, "path": path, "start": time.monotonic(),
            "ua": request.getHeader("user-agent") or "",
        }  # fmt: skip
        st = self.state
        st["hits"].append(entry)
        st["inflight"] += 1
        st["max_inflight"] = max(st["max_inflight"], st["inflight"])
        kind = "robots" if path == "/robots.txt" else "page"
        n = self.count[(host, kind)] = self.count.get((host, kind), 0) + 1
        done = {"v": False}

        def end(status: int | None) -> None:
            if not done["v"]:
                done["v"] = True
                st["inflight"] -= 1
                entry["end"], entry["status"] = time.monotonic(), status

        request.notifyFinish().addBoth(lambda _: end(entry.get("status")))

        def answer(status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            entry["status"] = status
            request.setResponseCode(status)
            for k, v in (headers or {}).items():
                request.setHeader(k, v)
            if "Retry-After" in (headers or {}):
                entry["retry_after"] = float(headers["Retry-After"])  # type: ignore[index]
            request.setHeader("content-type", "text/plain")
            request.write(body)
            request.finish()
            end(status)

        if host == "operator.test":
            body = json.dumps(BLOCKLIST) if path.endswith("blocklist.json") else SCHEMA
            answer(200, body.encode())
            return server.NOT_DONE_YET
        p = profile(host)
        if kind == "robots":
            if p == "huge-robots":
                answer(200, HUGE.encode())
            elif p == "robots-503" and n == 1:
                answer(503, b"robots.txt is down")
            elif p == "delay":
                answer(200, b"User-agent: *\nCrawl-delay: 1.5\n")
            else:
                answer(200, b"User-agent: *\nAllow: /\n")
            return server.NOT_DONE_YET
        transport = request.channel.transport
        if p == "reset" and n % 3 == 1:
            entry["fault"] = "reset"
            transport.abortConnection()
        elif p == "closed" and n % 3 == 1:
            entry["fault"] = "closed"
            transport.loseConnection()
        elif p == "stall" and n == 1:
            entry["fault"] = "stall"  # never answered
        elif p == "slow" and n % 2 == 1:
            self._dribble(request, entry, f"slow page {path}\n".encode() * 40, end)
        elif p == "truncated":
            entry["fault"] = "truncated"
            request.setHeader("content-length", "100000")
            request.write(b"only part of it\n")
            reactor.callLater(0.05, transport.loseConnection)
        elif p == "loop":
            target = path[:-2] if path.endswith("/a") else path + "/a"
            answer(302, b"", {"Location": target})
        elif p == "storm-ra" and n <= 3:
            answer(429, b"slow down", {"Retry-After": "2"})
        elif p == "storm-503" and n <= 3:
            answer(503, b"busy")
        else:
            answer(200, f"page {path} on {host}\n".encode())
        return server.NOT_DONE_YET

    def _dribble(self, request: Any, entry: dict[str, Any], body: bytes, end: Any) -> None:
        entry["status"] = 200
        request.setHeader("content-type", "text/plain")
        request.setHeader("content-length", str(len(body)))
        chunks = [body[i : i + 64] for i in range(0, len(body), 64)]

        def step() -> None:
            if request.finished or request._disconnected:
                return
            request.write(chunks.pop(0))
            if not chunks:  # the last byte is the end: the crawler has it all now
                request.finish()
                end(200)
                return
            reactor.callLater(0.03, step)

        step()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0, help="0: any free port")
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-seconds", type=float, default=3600)
    a = ap.parse_args()
    state: dict[str, Any] = {"hits": [], "inflight": 0, "max_inflight": 0}
    site = server.Site(Origin(state))
    site.noisy = False
    site.timeOut = None  # a stalled request stays open until the crawler gives up
    port = reactor.listenTCP(a.port, site, interface="127.0.0.1").getHost().port

    def dump(*_: object) -> None:
        with open(a.log, "w") as f:
            json.dump({"max_inflight": state["max_inflight"], "hits": state["hits"]}, f)
        if reactor.running:
            reactor.stop()

    signal.signal(signal.SIGTERM, lambda *_: reactor.callFromThread(dump))
    signal.signal(signal.SIGINT, lambda *_: reactor.callFromThread(dump))
    reactor.callLater(a.max_seconds, dump)
    print(f"ready {port}", flush=True)
    reactor.run(installSignalHandlers=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
