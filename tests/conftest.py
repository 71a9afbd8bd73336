"""The fixtures every test may ask for: the loopback origin (with the
operator's blocklist and schema served), its resolver, a session Redis, and
the switch that lets a test build a chain the start-up check would refuse;
no child crawl outlives the test that spawned it.
The helpers the test modules share are in :mod:`tests.support`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings

from scrapy_walsh_research.sandbox import Reply, SandboxServer, install_sandbox_resolver
from tests.support.crawling import (
    BLOCKLIST_HOST,
    BLOCKLIST_PATH,
    SCHEMA_PATH,
    SCHEMA_TEXT,
    blocklist_doc,
    json_reply,
)
from tests.support.processes import kill_leftover_children


@pytest.fixture(scope="session", autouse=True)
def sandbox_dns() -> Iterator[None]:
    restore = install_sandbox_resolver()
    yield
    restore()


@pytest.fixture(autouse=True)
def no_child_crawl_outlives_its_test() -> Iterator[None]:
    """A test that fails before awaiting a crawl it spawned would leave the
    child running (waiting for a store, loading the tests after it)."""
    yield
    kill_leftover_children()


@pytest.fixture
def server() -> Iterator[SandboxServer]:
    srv = SandboxServer().start()
    srv.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, json_reply(blocklist_doc()))
    srv.origin.route(BLOCKLIST_HOST, SCHEMA_PATH, Reply(200, SCHEMA_TEXT.read_text()))
    yield srv
    pytest_twisted.blockon(srv.stop())


@pytest.fixture
def without_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test build a deliberately broken chain, to show what a gate prevents.

    Only the start-up check (our own code) is patched, with the checks of
    the ``WALSH_`` values the typed settings run as they are read; the crawl
    is real.
    """
    from scrapy_walsh_research.settings import check, values

    monkeypatch.setattr(check, "problems", lambda settings: [])
    monkeypatch.setattr(values, "problems", lambda settings: [])


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real redis-server for the session; tests keep apart by key prefix.
    It is aged before use: a fleet meeting a Redis only seconds old takes it
    for one that may have lost a fleet's records, and waits."""
    from scrapy_walsh_research.settings.walsh import WalshSettings
    from scrapy_walsh_research.state.redis.connection import lost_history_wait, young_redis_s
    from tests.support.redis_server import RedisServer

    srv = RedisServer(tmp_path_factory.mktemp("redis")).start()
    srv.age(young_redis_s(lost_history_wait(WalshSettings.from_settings(Settings()))))
    yield srv
    srv.kill()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One real PostgreSQL cluster for the session; tests keep apart by table
    (the Redis prefix names the fleet's audit table)."""
    from tests.support.postgres_server import PostgresServer

    srv = PostgresServer().start()
    yield srv
    srv.remove()


#: the modules whose tests wait longest (Redis restarts, fleets of workers,
#: the soak): started first, so no worker is left with one of them at the end
SLOW_FIRST = (
    "test_fleet_redis_failures",
    "test_fleet_workers",
    "test_scale_soak",
    "test_fleet_shared_budget",
    "test_r2_robots_extensions",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)
