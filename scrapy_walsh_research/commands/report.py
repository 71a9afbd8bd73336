"""``scrapy walsh-report``: the evidence about a host, from the audit log, as
one self-contained HTML page (or JSON) to send a site owner who complains.

    scrapy walsh-report --host example.org [--since 2026-11-01] --out report.html
    scrapy walsh-report --host example.org --json            # to stdout
    scrapy walsh-report --out report.html                    # every host, linked
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.commands import ScrapyCommand
from scrapy.crawler import Crawler
from scrapy.exceptions import UsageError

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings = {"LOG_LEVEL": "WARNING"}

    def syntax(self) -> str:
        return "[--host HOST] [--since DATE] [--out FILE] [--json]"

    def short_desc(self) -> str:
        return "Write the audit log's evidence about a host (or all hosts) as HTML or JSON"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--host", default=None, help="this host and its subdomains")
        parser.add_argument(
            "--since", default=None, help="only entries from this UTC date or date-time on"
        )
        parser.add_argument(
            "--out", default=None, help="write here (HTML: default walsh-report.html)"
        )
        parser.add_argument("--json", action="store_true", help="JSON instead of HTML")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        from scrapy_walsh_research.evidence.host_evidence import parse_since
        from scrapy_walsh_research.evidence.purge import host_argument

        if args:
            raise UsageError("walsh-report takes options only, e.g. --host example.org")
        host = host_argument(opts.host, "--host") if opts.host is not None else None
        try:
            since = parse_since(opts.since) if opts.since else None
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        assert self.settings is not None
        from scrapy_walsh_research.commands._runner import crawl_state
        from scrapy_walsh_research.errors import WalshConfigurationError

        crawler = crawl_state(self.settings, "audit.sqlite3", "audit log")
        try:
            # all of the host's log: the gap before the first request after
            # --since is measured from the one before it
            entries = asyncio.run(self._query(crawler, host, None))
        except WalshConfigurationError as exc:
            raise UsageError(str(exc)) from None
        if host is not None:
            self._one(entries, host, opts, since)
        else:
            self._all(entries, opts, since)

    async def _query(
        self, crawler: Crawler, host: str | None, since: float | None
    ) -> list[dict[str, Any]]:
        from scrapy_walsh_research.evidence.audit import AuditTrail, RedisAudit, SQLiteAudit

        store = AuditTrail.for_crawler(crawler, prune=False).store
        try:
            return await store.query(host, since)
        finally:
            if isinstance(store, SQLiteAudit):
                store.close()
            elif isinstance(store, RedisAudit):
                await store.conn.close()

    def _one(
        self, entries: list[dict[str, Any]], host: str, opts: argparse.Namespace,
        since: float | None,
    ) -> None:  # fmt: skip
        from scrapy_walsh_research.evidence.host_evidence import collect
        from scrapy_walsh_research.evidence.pages import host_page

        evidence = collect(entries, host, since)
        if opts.json:
            self._write(json.dumps(evidence.as_json(), indent=2, sort_keys=True), opts.out)
            return
        out = Path(opts.out or "walsh-report.html")
        self._write(host_page(evidence, since=opts.since), out)
        smallest = evidence.smallest_gap
        print(
            f"{out}: {len(evidence.requests)} requests to {host} and its subdomains, "
            f"targets not fetched: {len(evidence.denied)} denied, "
            f"{len(evidence.not_fetched) - len(evidence.denied)} skipped or failed; smallest gap "
            f"{'—' if smallest is None else f'{smallest.gap:.3f} s'}, "
            f"{len(evidence.under)} under the interval"
        )

    def _all(
        self, entries: list[dict[str, Any]], opts: argparse.Namespace, since: float | None
    ) -> None:
        from scrapy_walsh_research.evidence.host_evidence import by_host
        from scrapy_walsh_research.evidence.pages import host_file, host_page, summary_page

        hosts = by_host(entries, since)
        if opts.json:
            data = {h: ev.as_json() for h, ev in hosts.items()}
            self._write(json.dumps(data, indent=2, sort_keys=True), opts.out)
            return
        out = Path(opts.out or "walsh-report.html")
        pages = out.with_name(out.stem + "_hosts")
        try:
            pages.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot write {pages}: {exc.strerror or exc}") from None
        for host, evidence in hosts.items():
            self._write(host_page(evidence, since=opts.since), pages / host_file(host))
        self._write(summary_page(hosts, pages.name, since=opts.since), out)
        under = sum(len(ev.under) for ev in hosts.values())
        print(f"{out}: {len(hosts)} hosts (pages in {pages}/), {under} gaps under the interval")

    @staticmethod
    def _write(text: str, out: str | Path | None) -> None:
        if not out:
            sys.stdout.write(text + "\n")
            return
        try:
            Path(out).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
