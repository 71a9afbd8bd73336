"""``scrapy walsh-enqueue FILE``: push a URL list onto the shared Redis feed."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.exceptions import UsageError
from scrapy.settings import SETTINGS_PRIORITIES

from scrapy_walsh_research.commands._operator import OperatorCommand
from scrapy_walsh_research.core.target_list import unreadable
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.redis.target_queue import enqueue

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import BaseSettings


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "[options] <url list>"

    def short_desc(self) -> str:
        return "Push a URL list onto the Redis feed read by `scrapy crawl targets -a redis_key=`"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument(
            "--key",
            default=None,
            help="Redis list name, under WALSH_REDIS_PREFIX "
            f"(default: WALSH_REDIS_TARGETS_KEY or {defaults.WALSH_REDIS_TARGETS_KEY!r})",
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        if len(args) != 1:
            raise UsageError("give exactly one URL list file")
        url = self.walsh.redis_url
        if not url:
            raise UsageError(
                "set WALSH_REDIS_URL (e.g. -s WALSH_REDIS_URL=redis://localhost:6379/0)"
            )
        path = Path(args[0])
        problem = unreadable(path)
        if problem is not None:
            raise UsageError(f"URL list {args[0]!r} {problem}")
        key = opts.key or self.walsh.redis_targets_key
        prefix = self.walsh.redis_prefix
        batch = uuid.uuid4().hex
        n = enqueue(url, key, path, prefix=prefix, batch=batch)
        fleet = fleet_options(self.settings, url, prefix)
        worker = shlex.join(["scrapy", "crawl", "targets", "-a", f"redis_key={key}", *fleet])
        workers = shlex.join(["scrapy", "walsh-workers", "N", "-a", f"redis_key={key}", *fleet])
        records = shlex.join(["scrapy", "walsh-records", "--key", key, "--batch", batch, *fleet])
        print(
            f"{n} lines pushed to {prefix}:{key} as batch {batch}.\n"
            f"Run workers, on any machine and as many as you like, with:\n  {worker}\n"
            f"or N of them on this one with:\n  {workers}\n"
            f"Their records, one per line:\n  {records}"
        )


def fleet_options(settings: BaseSettings, url: str, prefix: str) -> list[str]:
    """The ``-s`` options a worker needs to find this feed: the Redis URL, and
    the prefix when it is not the default. A URL with a password that came
    from the project's settings (not typed on this command line) is left out,
    not printed: the project's workers read it from there too."""
    options = []
    typed = (settings.getpriority("WALSH_REDIS_URL") or 0) >= SETTINGS_PRIORITIES["cmdline"]
    if typed or urlsplit(url).password is None:
        options += ["-s", f"WALSH_REDIS_URL={url}"]
    if prefix != defaults.WALSH_REDIS_PREFIX:
        options += ["-s", f"WALSH_REDIS_PREFIX={prefix}"]
    return options
