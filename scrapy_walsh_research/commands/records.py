"""``scrapy walsh-records``: the stored records of lines fed through Redis.

Each record is stored, once per line, before its line is acknowledged
(:class:`~scrapy_walsh_research.records.RecordPipeline`); a worker's ``-o``
file can lose its last records when the worker is killed, this store does
not. This prints them (or writes them with ``-o``) as JSON lines, by batch
and line number.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._operator import OperatorCommand

if TYPE_CHECKING:
    import argparse


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "[options]"

    def short_desc(self) -> str:
        return "Print the stored records of the lines fed through Redis (one per line)"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--key", default=None, help="the feed's Redis list name")
        parser.add_argument(
            "--batch", default=None, help="only this batch (walsh-enqueue prints it)"
        )
        parser.add_argument("--out", "-O", default=None, help="write JSON lines to this file")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        import redis

        from scrapy_walsh_research.state.redis.client import client_options

        assert self.settings is not None
        url = self.walsh.redis_url
        if not url:
            raise UsageError(
                "set WALSH_REDIS_URL (e.g. -s WALSH_REDIS_URL=redis://localhost:6379/0)"
            )
        key = opts.key or self.walsh.redis_targets_key
        prefix = self.walsh.redis_prefix
        client = redis.Redis.from_url(url, **client_options(decode_responses=True))
        pattern = f"{prefix}:{key}:records:{opts.batch or '*'}"
        try:
            batches = sorted(client.scan_iter(pattern))
            out = open(opts.out, "w") if opts.out else sys.stdout
            n = 0
            try:
                for name in batches:
                    stored = client.hgetall(name)
                    for line in sorted(stored, key=int):
                        out.write(json.dumps(json.loads(stored[line]), sort_keys=True) + "\n")
                        n += 1
            finally:
                if out is not sys.stdout:
                    out.close()
        finally:
            client.close()
        print(f"{n} records from {len(batches)} batch(es)", file=sys.stderr)
