"""``scrapy walsh-enqueue FILE``: push a URL list onto the shared Redis feed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from scrapy_walsh_research.core.target_list import unreadable
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.state.redis.target_queue import enqueue

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING"}

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
        url = self.settings.get("WALSH_REDIS_URL")
        if not url:
            raise UsageError(
                "set WALSH_REDIS_URL (e.g. -s WALSH_REDIS_URL=redis://localhost:6379/0)"
            )
        path = Path(args[0])
        problem = unreadable(path)
        if problem is not None:
            raise UsageError(f"URL list {args[0]!r} {problem}")
        key = (
            opts.key
            or self.settings.get("WALSH_REDIS_TARGETS_KEY")
            or defaults.WALSH_REDIS_TARGETS_KEY
        )
        prefix = self.settings.get("WALSH_REDIS_PREFIX") or defaults.WALSH_REDIS_PREFIX
        batch = uuid.uuid4().hex
        n = enqueue(url, key, path, prefix=prefix, batch=batch)
        print(
            f"{n} lines pushed to {prefix}:{key} as batch {batch}; run workers with: "
            f"scrapy crawl targets -a redis_key={key}; their records, one per line: "
            f"scrapy walsh-records --key {key} --batch {batch}"
        )
