"""Run the conformance check from a Scrapy command: reactor, resolver, spider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.log import configure_logging
from scrapy.utils.reactor import install_reactor
from twisted.python.failure import Failure

from scrapy_walsh_research._runtime.context import CrawlContext
from scrapy_walsh_research.spiders.targets import TargetsSpider

T = TypeVar("T")

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy.crawler import Crawler
    from scrapy.settings import Settings

    from scrapy_walsh_research.evidence.verdicts import ConformanceResult


def command_context(crawler: Crawler) -> CrawlContext:
    """The context of a command's crawler: its state store, and an audit
    trail that neither prunes nor waits unbounded for its store."""
    return CrawlContext.for_crawler(crawler, command=True)


def crawl_state(
    settings: Settings, filename: str, what: str, *, elsewhere: bool = False
) -> CrawlContext:
    """The context of a crawler for a command that reads what a crawl left
    in its state dir (*filename* there, unless the state is in Redis, or
    *elsewhere*), or UsageError saying where it looked: never an empty
    store created in passing."""
    from scrapy.crawler import Crawler
    from scrapy.exceptions import UsageError

    from scrapy_walsh_research.state.directory import state_dir

    crawler = Crawler(TargetsSpider, settings)
    context = command_context(crawler)
    if not context.settings.redis_url and not elsewhere:
        path = state_dir(context.settings) / filename
        if not path.exists():
            raise UsageError(
                f"no {what} at {path}: run this where the crawl ran, or set "
                "WALSH_STATE_DIR (or WALSH_REDIS_URL for a fleet) as the crawl had it"
            )
    return context


def project_targets_spider(settings: Settings) -> type:
    """The project's ``targets`` spider, or the bundled one if it has none."""
    from scrapy.spiderloader import get_spider_loader

    try:
        return get_spider_loader(settings).load("targets")
    except KeyError:
        return TargetsSpider


def run_blocking(settings: Settings, main: Callable[[], Awaitable[T]]) -> T:
    """Install the asyncio reactor (what the Redis backend runs on), run
    *main* on it, and return what it returns (or raise what it raised): for
    a command that works on a crawl's state with no crawl running."""
    install_reactor(
        "twisted.internet.asyncioreactor.AsyncioSelectorReactor", settings["ASYNCIO_EVENT_LOOP"]
    )
    configure_logging(settings)
    from twisted.internet import reactor as installed

    reactor: Any = installed
    outcome: dict[str, Any] = {}

    def start() -> None:
        def done(result: Any) -> None:
            outcome["result"] = result
            reactor.stop()

        deferred_from_coro(main()).addBoth(done)

    reactor.callWhenRunning(start)
    reactor.run(installSignalHandlers=False)
    result = outcome["result"]
    if isinstance(result, Failure):
        result.raiseException()
    return result  # type: ignore[no-any-return]


def run_conformance_blocking(settings: Settings) -> ConformanceResult:
    """Install the reactor, run the sandbox crawls, return the result."""
    install_reactor(
        settings["TWISTED_REACTOR"] or "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        settings["ASYNCIO_EVENT_LOOP"],
    )
    configure_logging(settings)
    # The reactor just installed: twisted types the module attribute as its
    # interfaces, whose run() takes no installSignalHandlers.
    from twisted.internet import reactor as installed

    # imported here: Scrapy imports every command module on every run
    from scrapy_walsh_research.conformance.run import run_conformance
    from scrapy_walsh_research.sandbox.origin import install_sandbox_resolver

    reactor: Any = installed
    install_sandbox_resolver(reactor)
    spidercls = project_targets_spider(settings)
    outcome: dict[str, ConformanceResult | Failure] = {}

    def main() -> None:
        d = deferred_from_coro(run_conformance(settings, spidercls))

        def done(result: ConformanceResult | Failure) -> None:
            outcome["result"] = result
            reactor.stop()

        d.addBoth(done)

    reactor.callWhenRunning(main)
    reactor.run(installSignalHandlers=False)
    result = outcome["result"]
    if isinstance(result, Failure):
        result.raiseException()
    return result
