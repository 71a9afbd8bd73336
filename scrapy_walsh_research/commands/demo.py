"""``scrapy walsh-demo``: the real ``targets`` crawl against the bundled sandbox.

Runs the project's spider with the project's effective settings through a
loopback origin (no network), then prints every record and what the origin
received, and checks them against the contract. Exit code 0 only when every
expectation holds.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.commands import ScrapyCommand

from scrapy_walsh_research.identity import USER_AGENT
from scrapy_walsh_research.sandbox.origin import SandboxServer
from scrapy_walsh_research.sandbox.scenario import (
    BAD_LINES,
    EXPECTED,
    UNTOUCHED_HOSTS,
    build,
    list_lines,
    sandbox_settings,
)

if TYPE_CHECKING:
    import argparse


class Command(ScrapyCommand):
    requires_project = True
    default_settings = {
        "TWISTED_DNS_RESOLVER": "scrapy_walsh_research.sandbox.origin.SandboxDNSResolver",
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }

    def short_desc(self) -> str:
        return "Crawl the bundled loopback sandbox with this project's settings and check the gates"

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.crawler_process is not None
        server = SandboxServer().start()
        build(server.origin, server.url)
        work = Path(tempfile.mkdtemp(prefix="walsh-demo-"))
        list_file = work / "urls.txt"
        list_file.write_text("\n".join(list_lines(server)) + "\n")
        settings = self.crawler_process.settings
        for name, value in {
            **sandbox_settings(server),
            "WALSH_STATE_DIR": str(work / "state"),
        }.items():
            settings.set(name, value, priority="cmdline")

        crawler = self.crawler_process.create_crawler("targets")
        items: list[dict[str, Any]] = []
        crawler.signals.connect(
            lambda item, **_: items.append(item), signals.item_scraped, weak=False
        )
        self.crawler_process.crawl(crawler, list=str(list_file))
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
            return
        self.exitcode = 0 if report(items, server) else 1


def report(items: list[dict[str, Any]], server: SandboxServer) -> bool:
    """Print records and origin evidence; True when every expectation holds."""
    by_line = sorted(items, key=lambda i: i["line"])
    ok = True
    print(f"\n{'line':>4}  {'outcome':<12} {'rule':<4} {'status':<6} url")
    for i in by_line:
        print(
            f"{i['line']:>4}  {i['outcome']:<12} {i['rule'] or '-':<4} "
            f"{i['status'] or '-':<6} {i['url']}"
        )
    print("\nchecks (judged from the records and from what the origin received):")
    records = {i["url"]: i for i in by_line}
    for e in EXPECTED:
        rec = records.get(server.url(e.host, e.path))
        got = (rec["outcome"], rec["rule"]) if rec else ("missing", None)
        hit = bool(server.origin.hits_for(e.host, e.path))
        passed = got == (e.outcome, e.rule) and hit == e.must_reach_origin
        ok &= passed
        print(
            f"  [{'PASS' if passed else 'FAIL'}] {e.host}{e.path}: {e.why} "
            f"(record {got[0]}/{got[1] or '-'}, "
            f"origin {'received it' if hit else 'received nothing'})"
        )
    for host in UNTOUCHED_HOSTS:
        n = len(server.origin.hits_for(host))
        ok &= n == 0
        print(f"  [{'PASS' if n == 0 else 'FAIL'}] {host} received no request at all (got {n})")
    invalid = [i for i in by_line if i["outcome"] == "invalid"]
    dup = [i for i in by_line if i["outcome"] == "duplicate"]
    passed = len(invalid) == len(BAD_LINES) and len(dup) == 1
    ok &= passed
    print(
        f"  [{'PASS' if passed else 'FAIL'}] bad lines reported as invalid ({len(invalid)}), "
        f"duplicate reported once ({len(dup)})"
    )
    bad_ua = [h for h in server.origin.hits if h.user_agent != USER_AGENT]
    ok &= not bad_ua
    print(
        f"  [{'PASS' if not bad_ua else 'FAIL'}] exact User-Agent on all "
        f"{len(server.origin.hits)} requests the origin received ({len(bad_ua)} wrong)"
    )
    print(f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'}")
    return ok
