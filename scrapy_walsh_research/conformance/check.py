"""The conformance check: the spec's §8 judged from what a sandbox origin received.

It starts a loopback origin with virtual hosts for every case (blocked apex
and subdomain, named and ``*`` robots groups, robots 404/503, Crawl-delay,
429 with Retry-After, redirects into blocked or disallowed places, a page
full of links and sub-resources, ETag, a feed, markdown, llms.txt,
duplicates, bad list lines, hosts stating usage preferences in robots.txt,
tdmrep.json and response headers, a slow host and one that answers 503
without Retry-After once), runs the project's real ``targets`` spider with
the project's effective settings four times (a first run; a restart with
the blocklist unreachable; a restart with the blocklist schema-invalid; a
restart where the schema and blocklist URLs both answer a gateway's error
object), once more with ``HTTPCACHE_ENABLED=True``, which must be refused
before any request, and
judges each requirement from the origin's log (arrival times, headers,
paths), the records and the stats. Nothing is asserted without a
measurement.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.defer import maybe_deferred_to_future

from scrapy_walsh_research.conformance.identity import Identity
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.identity import USER_AGENT
from scrapy_walsh_research.sandbox.crawl import crawl_list
from scrapy_walsh_research.sandbox.origin import Hit, Reply, SandboxServer
from scrapy_walsh_research.schemas import bundled_schema_text
from scrapy_walsh_research.usage import TDMREP_PATH

if TYPE_CHECKING:
    from scrapy.http import Response

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
#: what a CDN or gateway answers for any URL: JSON, and a valid JSON Schema
GATEWAY_ERROR = json.dumps({"error": "Bad Gateway", "status": 502})
#: requests another component injects with a marker it copied from the
#: bundle's documentation: they get no exemption from any gate
FORGED = [
    ("blocked.test", "/forged", {"walsh_internal": "blocklist"}),
    ("named.test", "/private/forged", {"walsh_internal": "robots"}),
    ("links.test", "/forged", {"walsh_target": {"line": 1, "url": "x", "canonical_url": "x"},
                               "is_start_request": True}),
]  # fmt: skip
HTTP_CACHE_ROW = "HTTP cache setting refused"


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor, task

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))


#: a host crawled in the first runs that opts out before the last one: what
#: was stored about it (validators, cadence) must then be purged
PURGED_HOST = "etag.test"
#: how long each answer of the slow host takes, and its pages (the adaptive rows)
SLOW_S = 0.4
SLOW_PAGES = ("/s/0", "/s/1", "/s/2")
#: the strained host answers 503 without Retry-After to its first request
STRAINED_PAGES = ("/a", "/b")


def _blocklist(refresh: str = "PT1S", *, opted_out: bool = False) -> dict[str, Any]:
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


class Scenario:
    """The sandbox's virtual hosts; ``phase`` selects the blocklist's behaviour."""

    def __init__(self, server: SandboxServer) -> None:
        self.server = server
        self.phase = 1
        self._busy_calls = 0
        self._drops = 0
        self._strained_calls = 0

    def url(self, host: str, path: str = "/") -> str:
        return self.server.url(host, path)

    def install(self) -> None:
        o, url = self.server.origin, self.url
        html = {"Content-Type": "text/html"}
        o.route(OPERATOR, BLOCKLIST_PATH, self._blocklist)
        o.route(OPERATOR, SCHEMA_PATH, self._schema)
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
        }
        for host, text in robots.items():
            o.route(host, "/robots.txt", Reply(200, text))
        for host in ("blocked.test", "www.blocked.test", "xblocked.test", "hop.test", "links.test",
                     "limit.test", "etag.test", "feed.test", "giveup.test",
                     "drop.test", "moved.test", "reserved.test", "withheld.test",
                     "strained.test"):  # fmt: skip
            o.route(host, "/robots.txt", Reply(200, ALLOW_ALL))
        o.route("down.test", "/robots.txt", Reply(503, "maintenance"))
        o.route("missing.test", "/robots.txt", Reply(404, "no robots here"))
        page = Reply(200, f"<html>{BODY_MARKER}</html>", html)
        pages = [("named.test", "/page"), ("named.test", "/page2"), ("named.test", "/private"),
                 ("star.test", "/page"), ("star.test", "/nope"), ("versioned.test", "/page"),
                 ("blocked.test", "/page"), ("blocked.test", "/landing"),
                 ("www.blocked.test", "/page"), ("xblocked.test", "/page"),
                 ("down.test", "/page"), ("missing.test", "/page"),
                 ("giveup.test", "/after"), ("starbot.test", "/page"), ("signal.test", "/page"),
                 ("reserved.test", "/page")]  # fmt: skip
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
        o.route("links.test", "/", Reply(200, LINKS_PAGE, html))
        for path in ("/style.css", "/app.js", "/next", "/img.png", "/frame"):
            o.route("links.test", path, Reply(200, "sub-resource"))
        o.route("links.test", "/llms.txt", Reply(200, LLMS, {"Content-Type": "text/plain"}))
        o.route("limit.test", "/busy", self._busy)
        o.route("giveup.test", "/huge", Reply(429, "tomorrow", {"Retry-After": "86400"}))
        o.route("drop.test", "/page", self._drop_once)
        for host, path, _ in FORGED:
            o.route(host, path, page)
        o.route("etag.test", "/doc", self._etag)
        o.route("feed.test", "/feed.xml", Reply(200, RSS, {"Content-Type": "application/rss+xml"}))
        o.route("feed.test", "/guide.md", Reply(200, MARKDOWN, {"Content-Type": "text/markdown"}))
        text = {"Content-Type": "text/plain"}
        o.route("slow.test", "/robots.txt", Reply(200, ALLOW_ALL, delay=SLOW_S))
        for path in SLOW_PAGES:
            o.route("slow.test", path, Reply(200, "slow", text, delay=SLOW_S))
        for path in STRAINED_PAGES:
            o.route("strained.test", path, self._strained)

    def _blocklist(self, hit: Hit) -> Reply:
        if self.phase == 2:
            return Reply(503, "down for maintenance")
        if self.phase == 3:
            invalid = {"contract": "walsh-research-blocklist/v1", "blocked": "none"}
            return Reply(200, json.dumps(invalid), {"Content-Type": "application/json"})
        if self.phase == 4:  # a gateway's error object, served as the blocklist
            return Reply(200, GATEWAY_ERROR, {"Content-Type": "application/json"})
        document = _blocklist(opted_out=self.phase == 5)
        return Reply(200, json.dumps(document), {"Content-Type": "application/json"})

    def _schema(self, hit: Hit) -> Reply:
        if self.phase == 4:  # ... and as the schema: valid JSON Schema, constraining nothing
            return Reply(200, GATEWAY_ERROR, {"Content-Type": "application/json"})
        return Reply(200, bundled_schema_text(), {"Content-Type": "application/json"})

    def _drop_once(self, hit: Hit) -> Reply:
        """Read the request, then close the (reused) connection without answering."""
        self._drops += 1
        return Reply(200, "ok", {"Content-Type": "text/plain"}, drop=self._drops == 1)

    def _strained(self, hit: Hit) -> Reply:
        """503 without Retry-After to the first request, then normal answers."""
        self._strained_calls += 1
        if self._strained_calls == 1:
            return Reply(503, "overloaded")
        return Reply(200, "ok", {"Content-Type": "text/plain"})

    def _busy(self, hit: Hit) -> Reply:
        self._busy_calls += 1
        if self._busy_calls == 1:
            return Reply(429, "slow down", {"Retry-After": "2"})
        return Reply(200, "ok", {"Content-Type": "text/plain"})

    def _etag(self, hit: Hit) -> Reply:
        if hit.headers.get("if-none-match") == '"e1"':
            return Reply(304, "")
        return Reply(200, "doc", {"ETag": '"e1"', "Last-Modified": "Sat, 21 Nov 2026 00:00:00 GMT",
                                  "Content-Type": "text/plain"})  # fmt: skip

    def run1_lines(self) -> list[str]:
        u = self.url
        return [
            "# Walsh-Research conformance sandbox",
            u("named.test", "/page"), u("named.test", "/page2"), u("named.test", "/private"),
            u("star.test", "/page"), u("star.test", "/nope"), u("versioned.test", "/page"),
            u("blocked.test", "/page"), u("www.blocked.test", "/page"), u("xblocked.test", "/page"),
            u("down.test", "/page"), u("missing.test", "/page"),
            u("hop.test", "/to-blocked"), u("hop.test", "/to-private"),
            u("links.test", "/"), u("limit.test", "/busy"),
            u("giveup.test", "/huge"), u("giveup.test", "/after"), u("drop.test", "/page"),
            u("etag.test", "/doc"), u("feed.test", "/feed.xml"), u("feed.test", "/guide.md"),
            u("named.test", "/page#again"), "not-a-url", "ftp://feed.test/file",
            u("moved.test", "/old"), u("starbot.test", "/page"), u("signal.test", "/page"),
            u("reserved.test", "/page"), u("withheld.test", "/doc"),
            *(u("slow.test", p) for p in SLOW_PAGES),
            *(u("strained.test", p) for p in STRAINED_PAGES),
        ]  # fmt: skip

    def restart_lines(self) -> list[str]:
        return [self.url("www.blocked.test", "/page"), self.url("etag.test", "/doc")]


class InjectionProbe:
    """Conformance-only extension: another component asks for a sub-resource.

    On the links page's response it injects a request for the page's image
    into the engine, as a media pipeline would, and requests that claim to be
    the bundle's own (:data:`FORGED`). R6 must stop them all.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.done = False
        crawler.signals.connect(self.on_response, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> InjectionProbe:
        return cls(crawler)

    def on_response(self, response: Response, request: Request, spider: Any) -> None:
        if self.done or not response.url.startswith("http://links.test:"):
            return
        self.done = True
        assert self.crawler.engine is not None
        self.crawler.engine.crawl(Request(response.urljoin("/img.png"), dont_filter=True))
        port = urlsplit(response.url).port
        for host, path, meta in FORGED:
            url = f"http://{host}:{port}{path}"
            self.crawler.engine.crawl(Request(url, meta=dict(meta), dont_filter=True))


@dataclass
class Run:
    records: list[dict[str, Any]]
    hits: list[Hit]
    stats: dict[str, Any]
    refused: str | None = None

    def record(self, url: str) -> dict[str, Any]:
        found = [r for r in self.records if r["url"] == url]
        return found[0] if found else {"outcome": "missing", "rule": None}

    def hits_for(self, host: str, path: str | None = None) -> list[Hit]:
        return [h for h in self.hits if h.host == host and (path is None or h.path == path)]


@dataclass
class Check:
    id: str
    level: str  # MUST or SHOULD
    title: str
    passed: bool
    measured: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    max_inflight: int = 0
    #: what the table should say beyond its rows (e.g. that signing is off)
    notes: list[str] = field(default_factory=list)

    @property
    def must_pass(self) -> bool:
        return all(c.passed for c in self.checks if c.level == "MUST")

    def table(self) -> str:
        width = max(len(c.title) for c in self.checks)
        lines = [
            f"{'':6} {'id':<5} {'level':<6} {'requirement':<{width}}  measured",
            "-" * (width + 40),
        ]
        for c in self.checks:
            mark = "PASS" if c.passed else "FAIL"
            lines.append(f"[{mark}] {c.id:<5} {c.level:<6} {c.title:<{width}}  {c.measured}")
        passed = sum(c.passed for c in self.checks)
        musts = [c for c in self.checks if c.level == "MUST"]
        lines.append("-" * (width + 40))
        lines.append(
            f"{passed}/{len(self.checks)} checks passed; "
            f"{sum(c.passed for c in musts)}/{len(musts)} MUST. "
            + ("Conformant." if self.must_pass else "NOT conformant.")
        )
        lines += [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "checks": [c.__dict__ for c in self.checks],
            "must_pass": self.must_pass,
            "notes": self.notes,
        }


async def _crawl(
    spidercls: type, settings: Settings, lines: list[str], work: Path, server: SandboxServer
) -> Run:
    start = len(server.origin.hits)
    try:
        records, crawler = await crawl_list(spidercls, settings, lines, work)
    except WalshConfigurationError as exc:
        return Run([], server.origin.hits[start:], {}, refused=str(exc))
    assert crawler.stats is not None
    return Run(records, server.origin.hits[start:], crawler.stats.get_stats())


def _settings(base: Settings, server: SandboxServer, state: Path, **extra: Any) -> Settings:
    settings = base.copy()
    overrides = {
        "WALSH_BLOCKLIST_URL": server.url(OPERATOR, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(OPERATOR, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        # the sandbox's list refreshes every second, so restarts meet a due list
        "WALSH_BLOCKLIST_MIN_REFRESH": BLOCKLIST_REFRESH_S,
        "WALSH_STATE_DIR": str(state),
        **extra,
    }
    for name, value in overrides.items():
        settings.set(name, value, priority="cmdline")
    extensions = settings.getdict("EXTENSIONS")
    extensions[f"{__name__}.InjectionProbe"] = 0
    settings.set("EXTENSIONS", extensions, priority="cmdline")
    return settings


async def run_conformance(base: Settings, spidercls: type, work: Path | None = None) -> Report:
    """Run the four sandbox crawls with *base* settings and judge them."""
    work = work or Path(tempfile.mkdtemp(prefix="walsh-conformance-"))
    state = work / "state"
    server = SandboxServer().start()
    scenario = Scenario(server)
    scenario.install()
    identity = Identity.for_run(base, work, server)
    if identity is not None:
        # the project's signature settings, with a key made for this run: the
        # real key never signs sandbox traffic
        base = base.copy()
        base.set("WALSH_SIGNING_KEY", str(identity.key_path), priority="cmdline")
    try:
        first = await _crawl(
            spidercls, _settings(base, server, state), scenario.run1_lines(), work, server
        )
        scenario.phase = 2  # restart: the blocklist is down
        # Restart once the adopted list is due (its refresh is PT1S), so the
        # restarted run must fetch it and meet the outage.
        await _sleep(BLOCKLIST_REFRESH_S + 0.1)
        second = await _crawl(
            spidercls, _settings(base, server, state, WALSH_RUN_INTERVAL=0),
            scenario.restart_lines(), work, server,
        )  # fmt: skip
        scenario.phase = 3  # restart: the blocklist is schema-invalid; project cadence
        await _sleep(BLOCKLIST_REFRESH_S + 0.1)
        third = await _crawl(
            spidercls, _settings(base, server, state), scenario.restart_lines(), work, server
        )
        scenario.phase = 4  # restart: schema and blocklist are a gateway's error object
        await _sleep(BLOCKLIST_REFRESH_S + 0.1)
        fourth = await _crawl(
            spidercls, _settings(base, server, state, WALSH_RUN_INTERVAL=0),
            scenario.restart_lines(), work, server,
        )  # fmt: skip
        stored_before = _stored_about(state, PURGED_HOST)
        scenario.phase = 5  # restart: the list now blocks a host crawled before
        await _sleep(BLOCKLIST_REFRESH_S + 0.1)
        fifth = await _crawl(
            spidercls, _settings(base, server, state, WALSH_RUN_INTERVAL=0),
            scenario.restart_lines(), work, server,
        )  # fmt: skip
        cache = await _crawl_with_http_cache(spidercls, base, scenario, work)
    finally:
        await maybe_deferred_to_future(server.stop())
    report = Report(max_inflight=server.origin.max_inflight)
    judge(report, scenario, first, second, third, fourth, server.origin.max_inflight)
    judge_http_cache(report, first, cache)
    judge_audit(report, base, state, [first, second, third, fourth, fifth])
    judge_purge(report, base, state, stored_before, fifth)
    if identity is None and not base.get("WALSH_SIGNING_KEY"):
        report.notes.append(
            "requests are unsigned (WALSH_SIGNING_KEY is not set); set it to sign every "
            "request (Web Bot Auth) and to check the signatures here"
        )
    elif identity is not None:  # (a key that cannot sign: every crawl was refused, saying why)
        identity.judge(report, [first, second, third, fourth, fifth])
    return report


async def _crawl_with_http_cache(
    spidercls: type, base: Settings, scenario: Scenario, work: Path
) -> Run:
    """The project's settings plus ``HTTPCACHE_ENABLED=True``: the start-up check
    must refuse before any request (a cache would serve the blocklist and
    robots.txt from disk and store bodies). Its own state and cache
    directories, so that if it does run, it touches nothing the other runs use."""
    settings = _settings(
        base,
        scenario.server,
        work / "state-http-cache",
        HTTPCACHE_ENABLED=True,
        HTTPCACHE_DIR=str(work / "httpcache"),
    )
    return await _crawl(spidercls, settings, scenario.restart_lines(), work, scenario.server)


def judge_http_cache(report: Report, r1: Run, cache: Run) -> None:
    """The row for the crawl with the HTTP cache turned on (a MUST)."""
    title = HTTP_CACHE_ROW
    if r1.refused:  # the project's own configuration is refused: every row fails alike
        reason = r1.refused.strip().splitlines()[-1].strip()
        report.checks.append(Check("R6", "MUST", title, False, f"crawl refused: {reason}"))
        return
    named = cache.refused is not None and "HTTPCACHE_ENABLED" in cache.refused
    if named:
        how = "refused naming HTTPCACHE_ENABLED"
    elif cache.refused:
        how = "refused without naming HTTPCACHE_ENABLED"
    else:
        how = "not refused"
    measured = f"{how}; {len(cache.hits)} requests reached the origin"
    report.checks.append(Check("R6", "MUST", title, named and not cache.hits, measured))


def judge_audit(report: Report, base: Settings, state: Path, runs: list[Run]) -> None:
    """The audit log holds every request the origin saw, and nothing else."""
    title = "audit log: every request the origin saw is logged, and nothing else"
    if base.get("WALSH_REDIS_URL"):
        report.notes.append("the audit log is in Redis here: its row is not checked")
        return
    if runs[0].refused:
        reason = runs[0].refused.strip().splitlines()[-1].strip()
        report.checks.append(Check("AUD", "MUST", title, False, f"crawl refused: {reason}"))
        return
    import sqlite3

    path = state / "audit.sqlite3"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = [json.loads(r[0]) for r in db.execute("SELECT entry FROM audit")]
        finally:
            db.close()
    except sqlite3.Error as exc:
        report.checks.append(Check("AUD", "MUST", title, False, f"no audit log at {path}: {exc}"))
        return
    seen = Counter((h.host, h.path) for run in runs for h in run.hits)
    logged: Counter[tuple[str, str]] = Counter()
    for e in rows:
        if e.get("event") == "request":
            parts = urlsplit(e["url"])
            path_q = parts.path + (f"?{parts.query}" if parts.query else "")
            logged[(e["host"], path_q)] += 1
    missing, extra = seen - logged, logged - seen
    measured = (
        f"{sum(logged.values())} logged, {sum(seen.values())} received; "
        f"missing {sorted(missing)[:2]}, extra {sorted(extra)[:2]}"
    )
    report.checks.append(Check("AUD", "MUST", title, not missing and not extra, measured))


def _stored_about(state: Path, host: str) -> int | None:
    """How many entries the state store holds about *host* (validators,
    first-seen, cadence); None when it is not a readable SQLite store here."""
    import sqlite3

    from scrapy_walsh_research.evidence.purge import NAMESPACES, stored_host

    try:
        db = sqlite3.connect(f"file:{state / 'state.sqlite3'}?mode=ro", uri=True)
        try:
            marks = ",".join("?" * len(NAMESPACES))
            rows = db.execute(f"SELECT key FROM kv WHERE namespace IN ({marks})", NAMESPACES)
            return sum(stored_host(key) == host for (key,) in rows)
        finally:
            db.close()
    except sqlite3.Error:
        return None


def judge_purge(report: Report, base: Settings, state: Path, before: int | None, run: Run) -> None:
    """Purge on opt-out: once the adopted list blocks a host crawled before,
    what was stored about it is gone, the purge is an audit entry naming the
    blocklist entry, and the host got no request."""
    title = "purge on opt-out: a newly blocked host's stored data is deleted, and audited"
    if base.get("WALSH_REDIS_URL"):
        report.notes.append("the state is in Redis here: the purge row is not checked")
        return
    if run.refused:
        reason = run.refused.strip().splitlines()[-1].strip()
        report.checks.append(Check("PRG", "MUST", title, False, f"crawl refused: {reason}"))
        return
    after = _stored_about(state, PURGED_HOST)
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{state / 'audit.sqlite3'}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT entry FROM audit WHERE host = ?", (PURGED_HOST,))
            purges = [e for e in (json.loads(r[0]) for r in rows) if e.get("event") == "purge"]
        finally:
            db.close()
    except sqlite3.Error:
        purges = []
    named = [p for p in purges if repr(PURGED_HOST) in str(p.get("reason"))]
    contacted = len(run.hits_for(PURGED_HOST))
    measured = (
        f"{before} stored entries before, {after} after; {len(named)} purge entries naming "
        f"the blocklist entry; {contacted} requests after it was blocked"
    )
    passed = bool(before) and after == 0 and bool(named) and contacted == 0
    report.checks.append(Check("PRG", "MUST", title, passed, measured))


def _gaps(hits: list[Hit]) -> dict[str, list[float]]:
    per_host: dict[str, list[float]] = defaultdict(list)
    for h in hits:
        per_host[h.host].append(h.t)
    return {host: [b - a for a, b in itertools.pairwise(ts)] for host, ts in per_host.items()}


def _host_path(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return (parts.hostname or ""), (parts.path or "/")


def judge(
    report: Report, s: Scenario, r1: Run, r2: Run, r3: Run, r4: Run, max_inflight: int
) -> None:
    """Append one :class:`Check` per requirement, each with what was measured."""

    def check(id_: str, level: str, title: str, fn: Callable[[], tuple[bool, str]]) -> None:
        if r1.refused:
            reason = r1.refused.strip().splitlines()[-1].strip()
            report.checks.append(Check(id_, level, title, False, f"crawl refused: {reason}"))
            return
        try:
            passed, measured = fn()
        except Exception as exc:  # a check that cannot be evaluated fails, saying why
            passed, measured = False, f"could not evaluate: {type(exc).__name__}: {exc}"
        report.checks.append(Check(id_, level, title, bool(passed), measured))

    def o(run: Run, host: str, path: str) -> str:
        """The record's "outcome/rule" for a target."""
        rec = run.record(s.url(host, path))
        return f"{rec['outcome']}/{rec.get('rule') or '-'}"

    def n(run: Run, host: str, path: str | None = None) -> int:
        """How many requests the origin received for host (and path) in a run."""
        return len(run.hits_for(host, path))

    def ua(hits: list[Hit]) -> tuple[bool, str]:
        good = sum(h.user_agent == USER_AGENT for h in hits)
        return bool(hits) and good == len(hits), f"{good}/{len(hits)} requests"

    all_hits = r1.hits + r2.hits + r3.hits + r4.hits
    site_hits = [h for h in all_hits if h.host != OPERATOR]
    own = ("/robots.txt", TDMREP_PATH)  # the bundle's per-origin documents
    targets = [h for h in site_hits if h.path not in (*own, "/llms.txt")]
    check("R1", "MUST", "exact User-Agent on target requests", lambda: ua(targets))
    check(
        "R1",
        "MUST",
        "exact User-Agent on robots.txt and tdmrep.json requests",
        lambda: ua([h for h in site_hits if h.path in own]),
    )
    check(
        "R1",
        "MUST",
        "exact User-Agent on blocklist and schema requests",
        lambda: ua([h for h in all_hits if h.host == OPERATOR]),
    )
    check(
        "R1",
        "MUST",
        "exact User-Agent on redirect hops and retries",
        lambda: ua(r1.hits_for("hop.test") + r1.hits_for("limit.test", "/busy")),
    )

    def robots_first() -> tuple[bool, str]:
        hosts = {h.host for h in r1.hits if h.host != OPERATOR}
        late = [host for host in hosts if r1.hits_for(host)[0].path != "/robots.txt"]
        return bool(
            hosts
        ) and not late, f"{len(hosts) - len(late)}/{len(hosts)} hosts: robots.txt first"

    check("R2", "MUST", "robots.txt fetched before any other request to a host", robots_first)
    check(
        "R2",
        "MUST",
        "disallowed paths never requested",
        lambda: (
            n(r1, "named.test", "/private") + n(r1, "star.test", "/nope") == 0
            and o(r1, "named.test", "/private") == "denied/R2",
            f"/private and /nope requested {n(r1, 'named.test', '/private')}"
            f"+{n(r1, 'star.test', '/nope')}x; record {o(r1, 'named.test', '/private')}",
        ),
    )
    check(
        "R2a",
        "MUST",
        "named Walsh-Research group overrides * (allows where * disallows)",
        lambda: (o(r1, "named.test", "/page") == "fetched/-", o(r1, "named.test", "/page")),
    )
    check(
        "R2a",
        "MUST",
        "named group Walsh-Research/1.0 overrides * (blocks where * allows)",
        lambda: (
            o(r1, "versioned.test", "/page") == "denied/R2"
            and n(r1, "versioned.test", "/page") == 0,
            o(r1, "versioned.test", "/page"),
        ),
    )
    check(
        "R2",
        "MUST",
        "'User-agent: Walsh' does not claim the Walsh-Research token",
        lambda: (o(r1, "star.test", "/page") == "fetched/-", o(r1, "star.test", "/page")),
    )
    check(
        "R2",
        "MUST",
        "'User-agent: *SomeBot*' is not the * group: its Disallow: / does not close the site",
        lambda: (o(r1, "starbot.test", "/page") == "fetched/-", o(r1, "starbot.test", "/page")),
    )
    check(
        "R2",
        "MUST",
        "robots.txt 404: no rules apply",
        lambda: (o(r1, "missing.test", "/page") == "fetched/-", o(r1, "missing.test", "/page")),
    )
    check(
        "R2",
        "MUST",
        "robots.txt 503: host fully disallowed (RFC 9309 2.3.1.4)",
        lambda: (
            [h.path for h in r1.hits_for("down.test")] == ["/robots.txt"]
            and o(r1, "down.test", "/page") == "denied/R2",
            f"down.test received {[h.path for h in r1.hits_for('down.test')]}",
        ),
    )

    def named_gap() -> tuple[bool, str]:
        gaps = _gaps(r1.hits).get("named.test", [])
        return bool(gaps) and min(
            gaps
        ) >= 2.0, f"min gap at named.test {min(gaps, default=0):.3f} s"

    check("R2d", "MUST", "Crawl-delay 2 of the named group honoured", named_gap)
    blocked = n(r1, "blocked.test") + n(r1, "www.blocked.test")
    check(
        "R3",
        "MUST",
        "operator blocklist blocks the apex (blocked.test)",
        lambda: (o(r1, "blocked.test", "/page") == "denied/R3", o(r1, "blocked.test", "/page")),
    )
    check(
        "R3a",
        "MUST",
        "subdomain www.blocked.test blocked by the apex entry",
        lambda: (
            o(r1, "www.blocked.test", "/page") == "denied/R3",
            o(r1, "www.blocked.test", "/page"),
        ),
    )
    check(
        "R3",
        "MUST",
        "blocklist checked before robots: blocked hosts get no request at all",
        lambda: (blocked == 0, f"{blocked} requests to blocked hosts, robots.txt included"),
    )
    check(
        "R3",
        "MUST",
        "unrelated host xblocked.test not falsely blocked",
        lambda: (o(r1, "xblocked.test", "/page") == "fetched/-", o(r1, "xblocked.test", "/page")),
    )
    check(
        "R3",
        "MUST",
        "redirect into a blocked host denied and not followed",
        lambda: (
            o(r1, "hop.test", "/to-blocked") == "denied/R3"
            and n(r1, "blocked.test", "/landing") == 0,
            f"{o(r1, 'hop.test', '/to-blocked')}; target requested "
            f"{n(r1, 'blocked.test', '/landing')}x",
        ),
    )
    check(
        "R2",
        "MUST",
        "redirect into a disallowed path denied and not followed",
        lambda: (
            o(r1, "hop.test", "/to-private") == "denied/R2"
            and n(r1, "named.test", "/private") == 0,
            o(r1, "hop.test", "/to-private"),
        ),
    )
    failed = r2.stats.get("walsh/blocklist/fetch_failed", 0)
    check(
        "R3b",
        "MUST",
        "last list retained when the blocklist is down (after a restart)",
        lambda: (
            o(r2, "www.blocked.test", "/page") == "denied/R3"
            and n(r2, "www.blocked.test") == 0
            and failed >= 1,
            f"blocklist failed {failed}x; record {o(r2, 'www.blocked.test', '/page')}",
        ),
    )
    rejected = r3.stats.get("walsh/blocklist/rejected", 0)
    check(
        "R3c",
        "MUST",
        "schema-invalid blocklist rejected, prior list retained",
        lambda: (
            rejected >= 1 and o(r3, "www.blocked.test", "/page") == "denied/R3",
            f"rejected {rejected}x; record {o(r3, 'www.blocked.test', '/page')}",
        ),
    )
    garbage = r4.stats.get("walsh/blocklist/rejected", 0)
    check(
        "R3c",
        "MUST",
        "garbage schema and blocklist after a good list: nothing adopted, opt-outs kept",
        lambda: (
            garbage >= 1
            and o(r4, "www.blocked.test", "/page") == "denied/R3"
            and n(r4, "www.blocked.test") == 0,
            f"rejected {garbage}x; record {o(r4, 'www.blocked.test', '/page')}",
        ),
    )
    check(
        "R4",
        "MUST",
        "serial: at most one request in flight",
        lambda: (max_inflight == 1, f"max in flight {max_inflight}"),
    )

    def min_gap() -> tuple[bool, str]:
        gaps = [(g, host) for host, hg in _gaps(all_hits).items() for g in hg]
        smallest, host = min(gaps)
        return smallest >= 1.0, f"min same-host gap {smallest:.3f} s ({host}) over {len(gaps)} gaps"

    check("R4", "MUST", "at least 1 s between requests to a host, as the origin saw them", min_gap)

    def first_contact() -> tuple[bool, str]:
        seen: set[str] = set()
        waits = []
        for prev, hit in itertools.pairwise(r1.hits):
            seen.add(prev.host)
            if hit.host not in seen:
                waits.append(hit.t - prev.t)
        worst = max(waits, default=0.0)
        return worst < 1.0, f"longest idle before a first contact {worst:.3f} s"

    check("R4c", "MUST", "first request to an unseen host not delayed", first_contact)

    def retry_after() -> tuple[bool, str]:
        busy = r1.hits_for("limit.test", "/busy")
        if len(busy) < 2:
            return False, f"{len(busy)} request(s) to /busy"
        waited = busy[1].t - busy[0].t
        fetched = o(r1, "limit.test", "/busy") == "fetched/-"
        return waited >= 2.0 and fetched, f"retried after {waited:.3f} s (Retry-After: 2)"

    check("R5", "MUST", "429 with Retry-After: 2 retried no sooner, then fetched", retry_after)
    check(
        "R5",
        "MUST",
        "Retry-After beyond the maximum: give up at once",
        lambda: (
            n(r1, "giveup.test", "/huge") == 1 and o(r1, "giveup.test", "/huge") == "failed/-",
            f"{n(r1, 'giveup.test', '/huge')} request(s); {o(r1, 'giveup.test', '/huge')}",
        ),
    )
    check(
        "R5",
        "MUST",
        "Retry-After on give-up still binds the host: its other target skipped, not sent",
        lambda: (
            n(r1, "giveup.test", "/after") == 0 and o(r1, "giveup.test", "/after") == "skipped/R5",
            f"/after requested {n(r1, 'giveup.test', '/after')}x; "
            f"record {o(r1, 'giveup.test', '/after')}",
        ),
    )

    def dropped() -> tuple[bool, str]:
        sent = [h.t for h in r1.hits_for("drop.test", "/page")]
        gap = min((b - a for a, b in itertools.pairwise(sent)), default=0.0)
        ok = len(sent) >= 2 and gap >= 1.0 and o(r1, "drop.test", "/page") == "fetched/-"
        return ok, f"{len(sent)} attempts, closest {gap:.3f} s apart"

    check(
        "R4",
        "MUST",
        "connection closed after the request was read: not re-sent at once",
        dropped,
    )

    def load_aware() -> tuple[bool, str]:
        hits = r1.hits_for("slow.test")
        fetched = sum(o(r1, "slow.test", p) == "fetched/-" for p in SLOW_PAGES)
        if len(hits) < 2:
            return False, f"{len(hits)} requests to slow.test"
        busy = SLOW_S * len(hits) / (hits[-1].t + SLOW_S - hits[0].t)
        g = [b.t - a.t for a, b in itertools.pairwise(hits)]
        ok = busy <= 0.25 and fetched == len(SLOW_PAGES)
        return ok, (
            f"busy {100 * busy:.1f} % of the time with {SLOW_S} s answers (gaps "
            f"{min(g):.2f}-{max(g):.2f} s); {fetched}/{len(SLOW_PAGES)} fetched"
        )

    check(
        "ADP",
        "SHOULD",
        f"load-aware: a host answering in {SLOW_S} s is kept at most 25 % busy",
        load_aware,
    )

    def distress() -> tuple[bool, str]:
        hits = r1.hits_for("strained.test")
        # the site's pages: not robots.txt or tdmrep.json, read before them
        pages = [h for h in hits if h.path not in ("/robots.txt", TDMREP_PATH)]
        fetched = sum(o(r1, "strained.test", p) == "fetched/-" for p in STRAINED_PAGES)
        after = [b.t - a.t for a, b in itertools.pairwise(pages[:3])]
        if len(after) < 2:
            return False, f"{len(pages)} requests to strained.test's pages"
        # at least twice the floor: the smallest backoff the start-up check allows
        ok = min(after) >= 2.0 and fetched == len(STRAINED_PAGES)
        return ok, (
            f"after its 503, the next two requests (the retry, another target) came "
            f"{after[0]:.2f} s and {after[1]:.2f} s apart; {fetched}/{len(STRAINED_PAGES)} fetched"
        )

    check(
        "ADP",
        "SHOULD",
        "distress: a 503 without Retry-After slows the whole host, which is not abandoned",
        distress,
    )

    def in_scope() -> tuple[bool, str]:
        lines = [x for x in s.run1_lines() + s.restart_lines() if "://" in x]
        # the bundle's own /llms.txt probe (R9) of a host whose target answered HTML
        probes = {(_host_path(r["url"])[0], "/llms.txt") for r in r1.records if r.get("llms_txt")}
        allowed = {_host_path(x) for x in lines} | probes
        # redirect hops of declared targets
        allowed |= {("named.test", "/private"), ("blocked.test", "/landing")}
        allowed |= {("moved.test", "/new")}
        extra = [f"{h.host}{h.path}" for h in site_hits
                 if h.path not in own and (h.host, h.path) not in allowed]  # fmt: skip
        return not extra, f"{len(extra)} requests beyond the declared targets {extra[:3]}"

    check("R6", "MUST", "no request beyond declared targets (no recursion)", in_scope)
    subs = [h for h in r1.hits_for("links.test") if h.path not in ("/", *own, "/llms.txt")]
    denied_r6 = r1.stats.get("walsh/denied/R6", 0)
    check(
        "R6",
        "MUST",
        "no sub-resources: an injected image request is denied",
        lambda: (
            not subs and denied_r6 >= 1,
            f"{len(subs)} sub-resource requests; {denied_r6} denied by R6",
        ),
    )
    leaks = sum(BODY_MARKER in json.dumps(r) for r in r1.records)
    forged = [f"{h}{p}" for h, p, _ in FORGED if r1.hits_for(h, p)]
    check(
        "R6",
        "MUST",
        "a forged internal marker gets no exemption (injected requests denied)",
        lambda: (
            not forged and r1.stats.get("walsh/internal/forged", 0) >= 2,
            f"{len(forged)}/{len(FORGED)} forged requests reached the origin; "
            f"{r1.stats.get('walsh/internal/forged', 0)} forged markers seen",
        ),
    )
    check(
        "R6",
        "MUST",
        "records carry metadata only, never the body",
        lambda: (
            bool(r1.records) and not leaks,
            f"{leaks}/{len(r1.records)} records hold body text",
        ),
    )

    def one_record_per_line() -> tuple[bool, str]:
        lines = [x for x in s.run1_lines() if x and not x.startswith("#")]
        counts = Counter(r["url"] for r in r1.records)
        invalid = sum(r["outcome"] == "invalid" for r in r1.records)
        ok = len(r1.records) == len(lines) and all(counts[x] == 1 for x in lines) and invalid == 2
        return ok, f"{len(r1.records)} records for {len(lines)} lines; {invalid} invalid"

    check(
        "REC",
        "MUST",
        "exactly one record per list line; bad lines reported invalid",
        one_record_per_line,
    )
    sent = [h.headers.get("if-none-match") for h in r2.hits_for("etag.test", "/doc")]
    check(
        "R7",
        "SHOULD",
        "conditional request with stored validators; 304 is not_modified",
        lambda: (
            sent == ['"e1"'] and o(r2, "etag.test", "/doc") == "not_modified/-",
            f"If-None-Match sent: {sent}; record {o(r2, 'etag.test', '/doc')}",
        ),
    )
    check(
        "R7b",
        "SHOULD",
        "dedup by canonical URL (a #fragment line fetched once)",
        lambda: (
            n(r1, "named.test", "/page") == 1
            and o(r1, "named.test", "/page#again") == "duplicate/-",
            f"named.test/page requested {n(r1, 'named.test', '/page')}x",
        ),
    )
    check(
        "R8",
        "SHOULD",
        "re-run inside the cadence sends nothing to the target host",
        lambda: (
            n(r3, "etag.test") == 0 and o(r3, "etag.test", "/doc") == "skipped/R8",
            f"{n(r3, 'etag.test')} requests in the re-run; {o(r3, 'etag.test', '/doc')}",
        ),
    )

    def accept() -> tuple[bool, str]:
        good = sum(h.headers.get("accept", "").startswith("text/markdown") for h in targets)
        return bool(targets) and good == len(targets), f"{good}/{len(targets)} prefer text/markdown"

    check("R9", "SHOULD", "content negotiation: every target request prefers text/markdown", accept)
    md = r1.record(s.url("feed.test", "/guide.md"))
    check(
        "R9",
        "SHOULD",
        "markdown read for headings and links",
        lambda: (
            md.get("structured") == "markdown" and len(md.get("links", [])) == 2,
            f"{len(md.get('headings', []))} headings, {len(md.get('links', []))} links",
        ),
    )
    feed = r1.record(s.url("feed.test", "/feed.xml"))
    check(
        "R9",
        "SHOULD",
        "feed read for per-entry metadata",
        lambda: (
            feed.get("structured") == "feed" and len(feed.get("entries", [])) == 2,
            f"{len(feed.get('entries', []))} entries",
        ),
    )
    page = r1.record(s.url("links.test", "/"))
    llms_links = len((page.get("llms_txt") or {}).get("links", []))
    check(
        "R9",
        "MUST",
        "HTML never parsed for content",
        lambda: (
            page.get("outcome") == "fetched"
            and page.get("structured") is None
            and "never parsed" in (page.get("note") or ""),
            f"structured={page.get('structured')!r}",
        ),
    )
    check(
        "R9",
        "SHOULD",
        "llms.txt probed for an HTML-only host; link map recorded",
        lambda: (llms_links == 1, f"llms.txt links recorded: {llms_links}"),
    )
    judge_preferences(check, s, r1, o, n)


def judge_preferences(
    check: Callable[[str, str, str, Callable[[], tuple[bool, str]]], None],
    s: Scenario,
    r1: Run,
    o: Callable[[Run, str, str], str],
    n: Callable[..., int],
) -> None:
    """PREF: the hosts' stated usage preferences, honoured for the declared
    purposes, judged from what the origin received and the records."""

    def tdmrep_first() -> tuple[bool, str]:
        hosts = sorted({h.host for h in r1.hits if h.path not in ("/robots.txt", TDMREP_PATH)}
                       - {OPERATOR})  # fmt: skip
        bad = []
        for host in hosts:
            paths = [h.path for h in r1.hits_for(host)]
            first = next(i for i, p in enumerate(paths) if p not in ("/robots.txt", TDMREP_PATH))
            if paths.count(TDMREP_PATH) != 1 or TDMREP_PATH not in paths[:first]:
                bad.append(host)
        return bool(hosts) and not bad, (
            f"{len(hosts) - len(bad)}/{len(hosts)} hosts: tdmrep.json once, before the first "
            f"target" + (f"; not: {bad[:3]}" if bad else "")
        )

    reserved = n(r1, "reserved.test", "/page")
    check("PREF", "MUST", "tdmrep.json fetched once per origin, before its first target",
          tdmrep_first)  # fmt: skip
    check(
        "PREF",
        "MUST",
        "a TDM reservation in tdmrep.json denies the target, with no request",
        lambda: (
            o(r1, "reserved.test", "/page") == "denied/PREF" and reserved == 0,
            f"{o(r1, 'reserved.test', '/page')}; /page requested {reserved}x",
        ),
    )
    withheld = r1.record(s.url("withheld.test", "/doc"))
    kept = {k: withheld.get(k) for k in ("status", "etag", "sha256", "headings", "links")}
    check(
        "PREF",
        "MUST",
        "a tdm-reservation header withholds the content: status and validators only",
        lambda: (
            o(r1, "withheld.test", "/doc") == "withheld/PREF"
            and kept["status"] == 200 and kept["etag"] == '"w1"'
            and kept["sha256"] is None and not kept["headings"] and not kept["links"],
            f"{o(r1, 'withheld.test', '/doc')}; kept {kept}",
        ),
    )  # fmt: skip
    signal = r1.record(s.url("signal.test", "/page"))
    stated = [p.get("signal") for p in signal.get("preferences") or []]
    check(
        "PREF",
        "MUST",
        "a preference about an undeclared purpose never denies; the record carries it",
        lambda: (
            o(r1, "signal.test", "/page") == "fetched/-" and "Content-Signal: ai-train" in stated,
            f"{o(r1, 'signal.test', '/page')}; preferences recorded: {stated}",
        ),
    )
