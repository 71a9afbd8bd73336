"""``scrapy walsh-purge HOST``: delete what the bundle stored about HOST and
its subdomains (validators, first-seen links and entries, cadence), as an
opt-out does, with an audit entry; and say which exported records exist."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._operator import OperatorCommand

if TYPE_CHECKING:
    import argparse

    from scrapy_walsh_research._runtime.context import CrawlContext


class Command(OperatorCommand):
    def syntax(self) -> str:
        return "HOST"

    def short_desc(self) -> str:
        return "Delete what was stored about HOST and its subdomains (purge on opt-out)"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        import sys

        from scrapy_walsh_research.errors import WalshAuditUnavailable, WalshConfigurationError
        from scrapy_walsh_research.evidence.purge import host_argument

        if len(args) != 1:
            raise UsageError("give one host name, e.g. scrapy walsh-purge example.org")
        host = host_argument(args[0])
        assert self.settings is not None
        from scrapy_walsh_research.commands._runner import crawl_state

        try:
            context = crawl_state(self.settings, "state.sqlite3", "state")
            asyncio.run(self._purge(context, host))
        except WalshConfigurationError as exc:
            raise UsageError(str(exc)) from None
        except WalshAuditUnavailable as exc:
            print(f"walsh-purge: {exc}", file=sys.stderr)
            self.exitcode = 1

    async def _purge(self, context: CrawlContext, host: str) -> None:
        from scrapy_walsh_research.evidence.purge import covers, in_words, purge, total

        store = context.store
        audit = context.audit
        exported, first, last = 0, "", ""
        try:
            # the purge's own entry must be storable before anything is
            # deleted: a purge the audit log does not show never happens
            opener = getattr(audit.store, "open", None)
            if opener is not None:
                await opener()
            purged = await purge(
                store, covers(host), cause="scrapy walsh-purge (on demand)", audit=audit
            )
            async for e in audit.store.entries(host):
                if e.get("event") == "decision" and e.get("outcome") in ("fetched", "not_modified"):
                    exported += 1
                    first, last = first or str(e.get("ts")), str(e.get("ts"))
        finally:
            await audit.store.close()
            await store.close()
        if purged:
            print(f"purged {total(purged)} stored entries for {len(purged)} host(s) under {host}:")
        else:
            print(f"nothing was stored about {host} or its subdomains: nothing to purge")
        for name, counts in sorted(purged.items()):
            print(f"  {name}: {in_words(counts)}")
        if exported:
            print(
                f"{exported} records of {host} were exported with -O/FEEDS between "
                f"{first} and {last} (audit log decisions): those files are yours to delete"
            )
