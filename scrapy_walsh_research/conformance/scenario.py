"""The sandbox a conformance run crawls: its virtual hosts, what each
answers, and the list lines each crawl reads.

Blocked apex and subdomain, named and ``*`` robots groups, robots 404/503
(one for good, one that heals),
Crawl-delay, 429 with Retry-After, redirects into blocked or disallowed
places, a page full of links and sub-resources, ETag, a feed, markdown,
llms.txt, duplicates, bad list lines, hosts stating usage preferences in
robots.txt, tdmrep.json and response headers, a slow host and one that
answers 503 without Retry-After once, a host whose sitemap says nothing
changed. The operator's blocklist changes
between crawls (:class:`Phase`).
"""

from __future__ import annotations

import json
import time
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._runtime.meta import INTERNAL_META, TARGET_META
from scrapy_walsh_research.core.blocklist.schema import bundled_schema_text
from scrapy_walsh_research.gates.preferences import TDMREP_PATH
from scrapy_walsh_research.sandbox.origin import Reply

if TYPE_CHECKING:
    from scrapy_walsh_research.sandbox.origin import Hit, SandboxServer

OPERATOR = "operator.test"
BLOCKLIST_PATH = "/.well-known/walsh-research/blocklist.json"
SCHEMA_PATH = "/.well-known/walsh-research/blocklist.schema.json"
BODY_MARKER = "SANDBOX-BODY-TEXT"
ALLOW_ALL = "User-agent: *\nAllow: /\n"
LINKS_PAGE = f"""<html><head>
<link rel="stylesheet" href="/style.css"><script src="/app.js"></script></head>
<body>{BODY_MARKER}<a href="/next">next</a><img src="/img.png"><iframe src="/frame"></iframe>
</body></html>"""
MARKDOWN = (
    f"# Guide\n\n{BODY_MARKER} see [setup](/setup) and [API](https://api.test/ref).\n\n## More\n"
)
LLMS = "# Links site\n\n> Summary\n\n## Docs\n\n- [Start](/start): begin here\n"
RSS = f"""<?xml version="1.0"?><rss version="2.0"><channel><title>Sandbox news</title>
<item><guid>n1</guid><title>One</title><link>/n1</link><description>{BODY_MARKER}</description></item>
<item><guid>n2</guid><title>Two</title><link>/n2</link></item></channel></rss>"""


BLOCKLIST_REFRESH_S = 1.0
#: the sandbox's outages last seconds: how soon a failed robots.txt is tried
#: again, and how long its targets wait for it
ROBOTS_RETRY_S = 1.0
POLICY_WAIT_S = 10.0
#: what a CDN or gateway answers for any URL: JSON, and a valid JSON Schema
GATEWAY_ERROR = json.dumps({"error": "Bad Gateway", "status": 502})
#: requests another component injects with a marker it copied from the
#: bundle's documentation: they get no exemption from any gate
FORGED: list[tuple[str, str, dict[str, Any]]] = [
    ("blocked.test", "/forged", {INTERNAL_META: "blocklist"}),
    ("named.test", "/private/forged", {INTERNAL_META: "robots"}),
    ("links.test", "/forged", {TARGET_META: {"line": 1, "url": "x", "canonical_url": "x"},
                               "is_start_request": True}),
]  # fmt: skip

#: a host crawled in the first runs that opts out before the last one: what
#: was stored about it (validators, cadence) must then be purged
PURGED_HOST = "etag.test"
#: how long each answer of the slow host takes, and its pages (the adaptive rows)
SLOW_S = 0.4
SLOW_PAGES = ("/s/0", "/s/1", "/s/2")
#: the strained host answers 503 without Retry-After to its first request
STRAINED_PAGES = ("/a", "/b")
#: the host whose robots.txt declares a sitemap, and its pages: none changes
#: after the first run, and the sitemap says so (R7s)
SITEMAP_HOST = "sitemap.test"
SITEMAP_PATH = "/sitemap.xml"
SITEMAP_PAGES = ("/a", "/b", "/c")
#: the first restart reads the sitemap when this many targets are due (the
#: project's own bound is for real hosts: the sandbox keeps the run short)
SITEMAP_MIN_TARGETS = len(SITEMAP_PAGES)


#: the host whose robots.txt asks for visits only in a window that is closed
VISIT_HOST = "visit.test"


def closed_visit_window(now: float | None = None) -> str:
    """A ``Visit-time`` window (UTC) that opened two hours ago and closed an
    hour ago: the whole run is outside it."""
    minute = int((time.time() if now is None else now) // 60)
    start, end = (minute - 120) % 1440, (minute - 60) % 1440
    return f"{start // 60:02d}{start % 60:02d}-{end // 60:02d}{end % 60:02d}"


def blocklist_document(refresh: str = "PT1S", *, opted_out: bool = False) -> dict[str, Any]:
    """The operator's list: blocked.test, and once it opted out, PURGED_HOST."""
    blocked = [{"domain": "blocked.test", "added": "2026-05-23", "reason": "email opt-out"}]
    if opted_out:
        blocked.append({"domain": PURGED_HOST, "added": "2026-11-22", "reason": "email opt-out"})
    return {
        "contract": "walsh-research-blocklist/v1",
        "updated": "2026-11-22T00:00:00Z" if opted_out else "2026-05-23T00:00:00Z",
        "operator": "Sandbox Operator",
        "contact": "ops@example.org",
        "policy": "https://wal.sh/bot/",
        "refresh": refresh,
        "blocked": blocked,
    }


class Phase(IntEnum):
    """What the operator's blocklist and schema URLs answer, crawl by crawl."""

    #: the first crawl: a valid list blocking blocked.test
    FIRST = 1
    #: a restart: the blocklist answers 503
    BLOCKLIST_DOWN = 2
    #: a restart: the blocklist is schema-invalid
    SCHEMA_INVALID = 3
    #: a restart: schema and blocklist are a gateway's error object
    GATEWAY_ERROR = 4
    #: a restart: the list now also blocks a host crawled before (PURGED_HOST)
    OPTED_OUT = 5


#: the answers' media types
HTML: dict[str, str | list[str]] = {"Content-Type": "text/html"}
TEXT: dict[str, str | list[str]] = {"Content-Type": "text/plain"}
JSON: dict[str, str | list[str]] = {"Content-Type": "application/json"}


class Scenario:
    """The sandbox's virtual hosts; ``phase`` selects the blocklist's behaviour."""

    def __init__(self, server: SandboxServer) -> None:
        self.server = server
        self.phase = Phase.FIRST
        self._busy_calls = 0
        self._drops = 0
        self._strained_calls = 0
        self._heal_calls = 0

    def url(self, host: str, path: str = "/") -> str:
        return self.server.url(host, path)

    def install(self) -> None:
        """Route every virtual host's paths on the sandbox origin."""
        o = self.server.origin
        o.route(OPERATOR, BLOCKLIST_PATH, self._blocklist)
        o.route(OPERATOR, SCHEMA_PATH, self._schema)
        self._install_robots()
        self._install_pages()
        self._install_behaviours()

    def _install_robots(self) -> None:
        o = self.server.origin
        robots = {
            "named.test": "User-agent: *\nDisallow: /\n\nUser-agent: Walsh-Research\nAllow: /\n"
            "Disallow: /private\nCrawl-delay: 2\n",
            "star.test": "User-agent: Walsh\nDisallow: /\n\nUser-agent: *\nDisallow: /nope\n",
            "versioned.test": "User-agent: *\nAllow: /\n\n"
            "User-agent: Walsh-Research/1.0\nDisallow: /\n",
            # a pattern sites write for one bot: not the global group
            "starbot.test": "User-agent: *SomeBot*\nDisallow: /\n\nUser-agent: *\nAllow: /\n",
            # usage preferences about purposes the bot never declares (R6)
            "signal.test": "User-agent: *\nContent-Signal: search=no, ai-train=no\nAllow: /\n",
            # a Visit-time window that closed an hour ago (UTC, from the clock)
            VISIT_HOST: f"User-agent: *\nAllow: /\nVisit-time: {closed_visit_window()}\n",
        }
        for host, text in robots.items():
            o.route(host, "/robots.txt", Reply(200, text))
        for host in ("blocked.test", "www.blocked.test", "xblocked.test", "hop.test", "links.test",
                     "limit.test", "etag.test", "feed.test", "giveup.test",
                     "drop.test", "moved.test", "reserved.test", "withheld.test",
                     "strained.test"):  # fmt: skip
            o.route(host, "/robots.txt", Reply(200, ALLOW_ALL))
        sitemap = f"{ALLOW_ALL}Sitemap: {self.url(SITEMAP_HOST, SITEMAP_PATH)}\n"
        o.route(SITEMAP_HOST, "/robots.txt", Reply(200, sitemap))
        o.route("down.test", "/robots.txt", Reply(503, "maintenance"))
        o.route("heals.test", "/robots.txt", self._heals)
        o.route("missing.test", "/robots.txt", Reply(404, "no robots here"))
        o.route("slow.test", "/robots.txt", Reply(200, ALLOW_ALL, delay=SLOW_S))

    def _install_pages(self) -> None:
        """Plain pages, redirects, the links page and the structured documents."""
        o, url = self.server.origin, self.url
        page = Reply(200, f"<html>{BODY_MARKER}</html>", HTML)
        pages = [("named.test", "/page"), ("named.test", "/page2"), ("named.test", "/private"),
                 ("star.test", "/page"), ("star.test", "/nope"), ("versioned.test", "/page"),
                 ("blocked.test", "/page"), ("blocked.test", "/landing"),
                 ("www.blocked.test", "/page"), ("xblocked.test", "/page"),
                 ("down.test", "/page"), ("missing.test", "/page"), ("heals.test", "/page"),
                 ("giveup.test", "/after"), ("starbot.test", "/page"), ("signal.test", "/page"),
                 ("reserved.test", "/page"), (VISIT_HOST, "/page")]  # fmt: skip
        for host, path in pages:
            o.route(host, path, page)
        reservation = json.dumps([{"location": "/", "tdm-reservation": 1}])
        o.route("reserved.test", TDMREP_PATH, Reply(200, reservation))
        o.route("withheld.test", "/doc", Reply(200, MARKDOWN, {
            "Content-Type": "text/markdown", "tdm-reservation": "1", "ETag": '"w1"'}))  # fmt: skip
        o.route(
            "hop.test", "/to-blocked", Reply(302, "", {"Location": url("blocked.test", "/landing")})
        )
        o.route(
            "hop.test", "/to-private", Reply(302, "", {"Location": url("named.test", "/private")})
        )
        o.route("moved.test", "/old", Reply(301, "", {"Location": url("moved.test", "/new")}))
        o.route("moved.test", "/new", page)
        o.route("links.test", "/", Reply(200, LINKS_PAGE, HTML))
        for path in ("/style.css", "/app.js", "/next", "/img.png", "/frame"):
            o.route("links.test", path, Reply(200, "sub-resource"))
        o.route("links.test", "/llms.txt", Reply(200, LLMS, TEXT))
        for host, path, _ in FORGED:
            o.route(host, path, page)
        o.route("feed.test", "/feed.xml", Reply(200, RSS, {"Content-Type": "application/rss+xml"}))
        o.route("feed.test", "/guide.md", Reply(200, MARKDOWN, {"Content-Type": "text/markdown"}))

    def _install_behaviours(self) -> None:
        """Hosts whose answers change or take time: 429, give-up, a dropped
        connection, ETag, a slow host, a strained one."""
        o = self.server.origin
        o.route("limit.test", "/busy", self._busy)
        o.route("giveup.test", "/huge", Reply(429, "tomorrow", {"Retry-After": "86400"}))
        o.route("drop.test", "/page", self._drop_once)
        o.route("etag.test", "/doc", self._etag)
        for path in SLOW_PAGES:
            o.route("slow.test", path, Reply(200, "slow", TEXT, delay=SLOW_S))
        for path in STRAINED_PAGES:
            o.route("strained.test", path, self._strained)
        for path in SITEMAP_PAGES:
            o.route(SITEMAP_HOST, path, self._unchanged)
        entries = "".join(
            f"<url><loc>{self.url(SITEMAP_HOST, p)}</loc><lastmod>2020-01-01</lastmod></url>"
            for p in SITEMAP_PAGES
        )
        o.route(SITEMAP_HOST, SITEMAP_PATH, Reply(200, f"<urlset>{entries}</urlset>", {
            "Content-Type": "application/xml"}))  # fmt: skip

    def _blocklist(self, hit: Hit) -> Reply:
        if self.phase == Phase.BLOCKLIST_DOWN:
            return Reply(503, "down for maintenance")
        if self.phase == Phase.SCHEMA_INVALID:
            invalid = {"contract": "walsh-research-blocklist/v1", "blocked": "none"}
            return Reply(200, json.dumps(invalid), JSON)
        if self.phase == Phase.GATEWAY_ERROR:  # a gateway's error object, served as the blocklist
            return Reply(200, GATEWAY_ERROR, JSON)
        document = blocklist_document(opted_out=self.phase == Phase.OPTED_OUT)
        return Reply(200, json.dumps(document), JSON)

    def _schema(self, hit: Hit) -> Reply:
        if self.phase == Phase.GATEWAY_ERROR:  # ... and as the schema: constraining nothing
            return Reply(200, GATEWAY_ERROR, JSON)
        return Reply(200, bundled_schema_text(), JSON)

    def _drop_once(self, hit: Hit) -> Reply:
        """Read the request, then close the (reused) connection without answering."""
        self._drops += 1
        return Reply(200, "ok", TEXT, drop=self._drops == 1)

    def _strained(self, hit: Hit) -> Reply:
        """503 without Retry-After to the first request, then normal answers."""
        self._strained_calls += 1
        if self._strained_calls == 1:
            return Reply(503, "overloaded")
        return Reply(200, "ok", TEXT)

    def _heals(self, hit: Hit) -> Reply:
        """robots.txt answers 503 to its first request, then allows all."""
        self._heal_calls += 1
        if self._heal_calls == 1:
            return Reply(503, "overloaded")
        return Reply(200, ALLOW_ALL)

    def _busy(self, hit: Hit) -> Reply:
        self._busy_calls += 1
        if self._busy_calls == 1:
            return Reply(429, "slow down", {"Retry-After": "2"})
        return Reply(200, "ok", TEXT)

    def _unchanged(self, hit: Hit) -> Reply:
        if hit.headers.get("if-none-match") == '"u1"':
            return Reply(304, "")
        return Reply(200, "unchanged", {"ETag": '"u1"', "Content-Type": "text/plain"})

    def _etag(self, hit: Hit) -> Reply:
        if hit.headers.get("if-none-match") == '"e1"':
            return Reply(304, "")
        return Reply(200, "doc", {"ETag": '"e1"', "Last-Modified": "Sat, 21 Nov 2026 00:00:00 GMT",
                                  "Content-Type": "text/plain"})  # fmt: skip

    def run1_lines(self) -> list[str]:
        """The first crawl's list: every case, a duplicate and two bad lines."""
        u = self.url
        return [
            "# Walsh-Research conformance sandbox",
            u("named.test", "/page"), u("named.test", "/page2"), u("named.test", "/private"),
            u("star.test", "/page"), u("star.test", "/nope"), u("versioned.test", "/page"),
            u("blocked.test", "/page"), u("www.blocked.test", "/page"), u("xblocked.test", "/page"),
            u("down.test", "/page"), u("missing.test", "/page"), u("heals.test", "/page"),
            u("hop.test", "/to-blocked"), u("hop.test", "/to-private"),
            u("links.test", "/"), u("limit.test", "/busy"),
            u("giveup.test", "/huge"), u("giveup.test", "/after"), u("drop.test", "/page"),
            u("etag.test", "/doc"), u("feed.test", "/feed.xml"), u("feed.test", "/guide.md"),
            u("named.test", "/page#again"), "not-a-url", "ftp://feed.test/file",
            u("moved.test", "/old"), u("starbot.test", "/page"), u("signal.test", "/page"),
            u("reserved.test", "/page"), u("withheld.test", "/doc"), u(VISIT_HOST, "/page"),
            *(u("slow.test", p) for p in SLOW_PAGES),
            *(u("strained.test", p) for p in STRAINED_PAGES),
            *self.sitemap_lines(),
        ]  # fmt: skip

    def restart_lines(self) -> list[str]:
        """The restarts' list: a blocked subdomain and the host with validators."""
        return [self.url("www.blocked.test", "/page"), self.url("etag.test", "/doc")]

    def sitemap_lines(self) -> list[str]:
        """The sitemap host's pages: in the first run, and again in the first restart."""
        return [self.url(SITEMAP_HOST, p) for p in SITEMAP_PAGES]
