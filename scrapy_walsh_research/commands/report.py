"""``scrapy walsh-report``: the evidence about a host, from the audit log, as
one self-contained HTML page (or JSON) to send a site owner who complains.

    scrapy walsh-report --host example.org [--since 2026-11-01] --out report.html
    scrapy walsh-report --host example.org --json            # to stdout
    scrapy walsh-report --out report.html                    # every host, linked
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from scrapy.exceptions import UsageError

from scrapy_walsh_research.commands._operator import OperatorCommand

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.evidence.audit import AuditStore


class Command(OperatorCommand):
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
        from scrapy_walsh_research.errors import WalshAuditUnavailable, WalshConfigurationError

        try:
            context = crawl_state(
                self.settings, "audit.sqlite3", "audit log",
                elsewhere=bool(self.walsh.audit_url),
            )  # fmt: skip
            asyncio.run(self._report(context, host, since, opts))
        except WalshConfigurationError as exc:
            raise UsageError(str(exc)) from None
        except WalshAuditUnavailable as exc:
            # a read that cannot finish ends with one line, never a retry loop
            print(f"walsh-report: {exc}", file=sys.stderr)
            self.exitcode = 1

    async def _report(
        self, context: CrawlContext, host: str | None, since: float | None, opts: argparse.Namespace
    ) -> None:
        store = context.audit.store
        try:
            if host is not None:
                await self._one(store, host, opts, since)
            else:
                await self._all(store, opts, since)
        finally:
            await store.close()
            if context.redis is not None:
                await context.redis.close()

    async def _one(
        self, store: AuditStore, host: str, opts: argparse.Namespace, since: float | None
    ) -> None:
        from scrapy_walsh_research.evidence.host_evidence import collect_stream
        from scrapy_walsh_research.evidence.pages import host_page

        # all of the host's log (through its index): the gap before the first
        # request after --since is measured from the one before it
        evidence = await collect_stream(store.entries(host), host, since)
        if opts.json:
            self._write(json.dumps(evidence.as_json(), indent=2, sort_keys=True), opts.out)
            return
        out = Path(opts.out or "walsh-report.html")
        self._write(host_page(evidence, since=opts.since), out)
        smallest = evidence.smallest_gap
        print(
            f"{out}: {evidence.request_count} requests to {host} and its subdomains, "
            f"targets not fetched: {evidence.denied_count} denied, "
            f"{evidence.not_fetched_count - evidence.denied_count} skipped or failed; smallest "
            f"gap {'—' if smallest is None else f'{smallest.gap:.3f} s'}, "
            f"{evidence.under_count} under the interval"
        )

    async def _all(self, store: AuditStore, opts: argparse.Namespace, since: float | None) -> None:
        """Every exact host, one at a time: each host's evidence is read,
        written and dropped, so the summary of many hosts holds no rows."""
        from scrapy_walsh_research.evidence.host_evidence import collect_stream
        from scrapy_walsh_research.evidence.pages import (
            HostSummary,
            host_file,
            host_page,
            summary_page,
        )

        hosts = await store.hosts(since)
        if opts.json:
            with self._opened(opts.out) as f:
                f.write("{")
                first = True
                for host in hosts:
                    ev = await collect_stream(store.entries(host, subdomains=False), host, since)
                    if ev.empty:
                        continue
                    f.write(("" if first else ",") + f"\n{json.dumps(host)}: ")
                    f.write(json.dumps(ev.as_json(), sort_keys=True))
                    first = False
                f.write("\n}\n")
            return
        out = Path(opts.out or "walsh-report.html")
        pages = out.with_name(out.stem + "_hosts")
        try:
            pages.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot write {pages}: {exc.strerror or exc}") from None
        summaries: dict[str, HostSummary] = {}
        for host in hosts:
            ev = await collect_stream(store.entries(host, subdomains=False), host, since)
            if ev.empty:
                continue
            self._write(host_page(ev, since=opts.since), pages / host_file(host))
            summaries[host] = HostSummary.of(ev)
        self._write(summary_page(summaries, pages.name, since=opts.since), out)
        under = sum(s.under for s in summaries.values())
        print(f"{out}: {len(summaries)} hosts (pages in {pages}/), {under} gaps under the interval")

    @staticmethod
    @contextlib.contextmanager
    def _opened(out: str | None) -> Iterator[TextIO]:
        if not out:
            yield sys.stdout
            return
        try:
            with open(out, "w", encoding="utf-8") as f:
                yield f
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None

    @staticmethod
    def _write(text: str, out: str | Path | None) -> None:
        if not out:
            sys.stdout.write(text + "\n")
            return
        try:
            Path(out).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
