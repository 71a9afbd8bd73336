"""Real crawls against a real loopback origin, asserting what the origin saw."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_from_coro
from twisted.internet import defer, protocol

from scrapy_walsh_research.sandbox import Reply, SandboxServer, install_sandbox_resolver
from scrapy_walsh_research.sandbox.crawl import crawl_list, crawl_spider
from scrapy_walsh_research.spiders.targets import TargetsSpider

BLOCKLIST_HOST = "operator.test"
BLOCKLIST_PATH = "/.well-known/walsh-research/blocklist.json"
SCHEMA_PATH = "/.well-known/walsh-research/blocklist.schema.json"
#: fetched once per origin after robots.txt, before its first target (PREF)
TDMREP = "/.well-known/tdmrep.json"
SCHEMA_TEXT = Path(__file__).parent.parent / "scrapy_walsh_research/core/blocklist/blocklist.schema.json"


def blocklist_doc(*domains: str, refresh: str = "PT6H") -> dict[str, Any]:
    return {
        "contract": "walsh-research-blocklist/v1",
        "updated": "2026-05-23T00:00:00Z",
        "operator": "Test Operator",
        "contact": "ops@example.org",
        "policy": "https://wal.sh/bot/",
        "refresh": refresh,
        "blocked": [{"domain": d, "added": "2026-05-23", "reason": "test"} for d in domains],
    }


def json_reply(doc: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(doc), {"Content-Type": "application/json"})


@pytest.fixture(scope="session", autouse=True)
def sandbox_dns() -> Iterator[None]:
    restore = install_sandbox_resolver()
    yield
    restore()


@pytest.fixture
def server() -> Iterator[SandboxServer]:
    srv = SandboxServer().start()
    srv.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc()))
    srv.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, Reply(200, SCHEMA_TEXT.read_text()))
    yield srv
    pytest_twisted.blockon(srv.stop())


@dataclass
class CrawlResult:
    items: list[dict[str, Any]]
    stats: dict[str, Any]
    crawler: Crawler
    logs: list[str] = field(default_factory=list)

    def by_url(self) -> dict[str, dict[str, Any]]:
        return {i["url"]: i for i in self.items}


def base_settings(server: SandboxServer, state_dir: Path, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "ADDONS": {"scrapy_walsh_research.Addon": 0},
        "WALSH_BLOCKLIST_URL": server.url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(BLOCKLIST_HOST, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        "WALSH_STATE_DIR": str(state_dir),
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "DOWNLOAD_TIMEOUT": 10,
        # Tests re-run crawls on one state dir; R8 cadence is tested on its own.
        "WALSH_RUN_INTERVAL": 0,
        # Twisted answers text/html by default, which would probe /llms.txt
        # after every target; R9 tests turn the probe on.
        "WALSH_LLMS_PROBE": False,
    }
    settings.update(overrides)
    return settings


async def crawl(
    settings: dict[str, Any] | Settings,
    lines: list[str],
    tmp_path: Path,
    spidercls: type = TargetsSpider,
) -> CrawlResult:
    # Scrapy awaits asyncio futures: run the crawl as an asyncio task.
    return await deferred_from_coro(crawl_task(settings, lines, tmp_path, spidercls))


@pytest.fixture
def without_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test build a deliberately broken chain, to show what a gate prevents.

    Only the start-up check (our own code) is patched; the crawl is real.
    """
    from scrapy_walsh_research.settings import check

    monkeypatch.setattr(check, "problems", lambda settings: [])


def write_list(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "urls.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def gaps(hits: list[Any]) -> list[float]:
    """Seconds between consecutive arrivals, as the origin saw them."""
    times = sorted(h.t for h in hits)
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real redis-server for the session; tests keep apart by key prefix.
    It is aged before use: a fleet meeting a Redis only seconds old takes it
    for one that may have lost a fleet's records, and waits."""
    from scrapy_walsh_research.sandbox.redis_server import RedisServer
    from scrapy_walsh_research.state.redis.connection import lost_history_wait, young_redis_s

    srv = RedisServer(tmp_path_factory.mktemp("redis")).start()
    srv.age(young_redis_s(lost_history_wait(Settings())))
    yield srv
    srv.kill()


_prefixes = itertools.count()


def redis_settings(redis_server: Any, **overrides: Any) -> dict[str, Any]:
    """Settings that put every piece of politeness state in the test's own Redis keys."""
    settings = {
        "WALSH_REDIS_URL": redis_server.url,
        "WALSH_REDIS_PREFIX": f"t{next(_prefixes)}-{id(redis_server)}",
    }
    settings.update(overrides)
    return settings


async def crawl_feed(
    settings: dict[str, Any], key: str, spidercls: type = TargetsSpider
) -> CrawlResult:
    """A worker: the targets spider reading its lines from the Redis feed *key*."""
    items, crawler = await crawl_spider(spidercls, settings, redis_key=key)
    return CrawlResult(items, crawler.stats.get_stats(), crawler)


async def crawl_task(
    settings: dict[str, Any] | Settings,
    lines: list[str],
    work: Path,
    spidercls: type = TargetsSpider,
) -> CrawlResult:
    """:func:`crawl` as an asyncio coroutine, to run beside other workers."""
    work.mkdir(parents=True, exist_ok=True)
    items, crawler = await crawl_list(spidercls, settings, lines, work)
    return CrawlResult(items, crawler.stats.get_stats(), crawler)


class ProcessCrawl(protocol.ProcessProtocol):
    """A ``scrapy crawl targets`` in a real child process (to SIGKILL it)."""

    def __init__(self) -> None:
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.err = b""
        self.transport: Any = None

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Any) -> None:
        self.ended.callback(None)


def spawn_targets_crawl(
    server: SandboxServer, list_file: Path, state: Path, **settings: Any
) -> ProcessCrawl:
    """Start the example project's ``targets`` spider on *list_file* in a child
    process, pointed at the sandbox; *settings* are passed with ``-s``."""
    return _spawn(server, f"list={list_file}", state, settings)


def spawn_worker(
    server: SandboxServer,
    key: str,
    state: Path,
    log: Path | None = None,
    extra_path: Path | None = None,
    **settings: Any,
) -> ProcessCrawl:
    """A worker process: the ``targets`` spider reading the Redis feed *key*;
    with *log*, its records go to that JSON-lines file (``-o``); *extra_path*
    goes first on its PYTHONPATH (a ``sitecustomize`` to skew its clock)."""
    if log is not None:
        settings.setdefault("FEEDS", json.dumps({str(log): {"format": "jsonlines"}}))
    return _spawn(server, f"redis_key={key}", state, settings, extra_path)


def _spawn(
    server: SandboxServer,
    spider_arg: str,
    state: Path,
    settings: dict[str, Any],
    extra_path: Path | None = None,
    project: Path | None = None,
    command: tuple[str, ...] = ("crawl", "targets"),
    proc: ProcessCrawl | None = None,
) -> ProcessCrawl:
    """``scrapy crawl targets`` (or *command*) in a child process, in
    *project* (default: the example project), pointed at the sandbox."""
    from twisted.internet import reactor

    project = project or Path(__file__).parent.parent / "example_project"
    scrapy_bin = str(Path(sys.executable).parent / "scrapy")
    options = {
        "WALSH_BLOCKLIST_URL": server.url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(BLOCKLIST_HOST, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        "WALSH_STATE_DIR": state,
        "WALSH_RUN_INTERVAL": 0,
        "WALSH_LLMS_PROBE": False,
        "TWISTED_DNS_RESOLVER": "scrapy_walsh_research.sandbox.origin.SandboxDNSResolver",
        **settings,
    }
    args = [scrapy_bin, *command, "-a", spider_arg]
    for name, value in options.items():
        args += ["-s", f"{name}={value}"]
    first = [str(extra_path)] if extra_path is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*first, str(project), *sys.path])}
    proc = proc or ProcessCrawl()
    proc.transport = reactor.spawnProcess(proc, scrapy_bin, args, env=env, path=str(project))
    return proc


async def sleep(seconds: float) -> None:
    from twisted.internet import reactor, task

    await task.deferLater(reactor, seconds, lambda: None)


#: the modules whose tests wait longest (Redis restarts, fleets of workers,
#: the soak): started first, so no worker is left with one of them at the end
SLOW_FIRST = ("test_redis_recovery", "test_redis_fleet", "test_soak", "test_redis_shared_state")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)
