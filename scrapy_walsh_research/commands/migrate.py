"""``scrapy walsh-migrate [--from STATE_DIR]``: carry a single crawl's state
into the fleet's Redis (``WALSH_REDIS_URL``), so that moving from one
process to a fleet does not start its history from zero.

Explicit and once, not done by the workers as they start: a fleet's
workers run on many machines, each with a state directory of its own, and
a carry in every worker's start would race, and would mix a machine's old
history into a fleet that may have run for weeks without anyone choosing
to. What is carried, and the rule for each kind of state:
:mod:`scrapy_walsh_research.commands._migration`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._operator import OperatorCommand

if TYPE_CHECKING:
    import argparse

    from scrapy.crawler import Crawler

    from scrapy_walsh_research.commands._migration import Report


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "[--from STATE_DIR] -s WALSH_REDIS_URL=..."

    def short_desc(self) -> str:
        return "Carry a single crawl's state (WALSH_STATE_DIR) into the fleet's Redis"

    def long_desc(self) -> str:
        return (
            "Carry what a crawl without Redis learnt (R8 cadence, validators, robots.txt and "
            "tdmrep.json answers, the adopted blocklist, hosts not to be contacted yet, ...) "
            "into the fleet's Redis (WALSH_REDIS_URL, WALSH_REDIS_PREFIX), never replacing "
            "newer fleet state; safe to run again. Refused while a crawl uses the state dir."
        )

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--from",
            dest="source",
            default=None,
            metavar="STATE_DIR",
            help="the state directory to carry (default: WALSH_STATE_DIR, or the project's "
            ".scrapy/walsh)",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy.crawler import Crawler

        from scrapy_walsh_research.commands._runner import command_context, run_blocking
        from scrapy_walsh_research.core.urls import without_password
        from scrapy_walsh_research.errors import WalshConfigurationError
        from scrapy_walsh_research.spiders.targets import TargetsSpider
        from scrapy_walsh_research.state.directory import hold_state_dir, state_dir

        assert self.settings is not None
        settings = self.settings
        if args:
            raise UsageError("walsh-migrate takes no arguments: give the state dir with --from")
        url = self.walsh.redis_url
        if not url:
            raise UsageError(
                "walsh-migrate carries a state dir into the fleet's Redis: set WALSH_REDIS_URL "
                "(e.g. -s WALSH_REDIS_URL=redis://localhost:6379/0), and WALSH_REDIS_PREFIX as "
                "the workers have it"
            )
        if opts.source:
            settings.set("WALSH_STATE_DIR", opts.source, priority="cmdline")
        crawler = Crawler(TargetsSpider, settings)
        walsh = command_context(crawler).settings  # with --from's state dir
        directory = state_dir(walsh)
        database = directory / "state.sqlite3"
        if not database.exists():
            raise UsageError(
                f"no crawl state at {database}: give the state dir of the crawl to carry with "
                "--from (or run this where it ran, with its WALSH_STATE_DIR)"
            )
        try:
            lock = hold_state_dir(directory, crawler)
        except WalshConfigurationError:
            raise UsageError(
                f"the state dir {directory} is in use by a running crawl: stop it or let it "
                "end, then run walsh-migrate (its last requests, holds and cadence would be "
                "left behind)",
                print_help=False,
            ) from None
        try:
            report = run_blocking(settings, lambda: _migrate(crawler, database))
        finally:
            lock.close()
        prefix = walsh.redis_prefix
        print(
            f"Carried {Path(database)} into the fleet at {without_password(url)} "
            f"(prefix {prefix}):\n{report.table()}"
        )


async def _migrate(crawler: Crawler, database: Path) -> Report:
    from scrapy_walsh_research.commands._migration import Migration
    from scrapy_walsh_research.commands._runner import command_context
    from scrapy_walsh_research.state import clock_for
    from scrapy_walsh_research.state.sqlite import SQLiteStateStore

    source = SQLiteStateStore(database)
    fleet = command_context(crawler).store
    try:
        return await Migration(source, fleet, clock_for(crawler)).run()
    finally:
        await source.close()
        await fleet.close()
