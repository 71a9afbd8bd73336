"""``scrapy walsh-conformance``: the spec's §8 judged against the bundled sandbox.

Exit code 0 only when every MUST holds. Needs no network.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from scrapy.commands import ScrapyCommand

from scrapy_walsh_research.commands._runner import project_targets_spider, run_conformance_blocking

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import Settings

#: said on stderr before the run: the sandbox's faults are deliberate, and the
#: warnings they cause would otherwise read as problems of the project
EXPECTED_WARNINGS = (
    "walsh-conformance: the sandbox injects faults on purpose (list lines that are no URL, "
    "a robots.txt answering 503, forged internal markers, a Retry-After beyond the maximum, "
    "the blocklist down, invalid or unusable across restarts): the WARNING lines about them "
    "are expected, and whether each was handled right is its row's PASS or FAIL."
)


class Command(ScrapyCommand):
    requires_project = True
    requires_crawler_process = False  # it runs several crawls in sequence itself
    default_settings = {"LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False}

    def short_desc(self) -> str:
        return "Check this project against the Walsh-Research spec in a loopback sandbox"

    def add_options(self, parser: argparse.ArgumentParser) -> None:
        super().add_options(parser)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        refused = refused_configuration(self.settings)
        if refused is not None and not opts.json:
            # every row would fail with the same reason: said once, nothing run
            print(f"walsh-conformance: nothing was checked. {refused}", file=sys.stderr)
            self.exitcode = 1
            return
        print(EXPECTED_WARNINGS, file=sys.stderr, flush=True)
        report = run_conformance_blocking(self.settings)
        if opts.json:
            print(json.dumps(report.as_dict(), indent=2))
        elif report.refused:
            print(f"walsh-conformance: nothing was checked. {report.refused}", file=sys.stderr)
        else:
            print(report.table())
        self.exitcode = 0 if report.must_pass else 1


def refused_configuration(settings: Settings) -> str | None:
    """The start-up check's refusal of the project's settings with its
    add-ons applied, as a crawl would apply them, or None."""
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.settings.check import apply_addons

    return apply_addons(Crawler(project_targets_spider(settings), settings.copy()))
