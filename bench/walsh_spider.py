"""This bundle: the targets spider with the one-line add-on and nothing else
(in the multi-process mode, each worker also names itself in a header, so the
origin can count requests and in-flight requests per worker: BENCH_WORKER for
a worker started on its own, WALSH_WORKER_INDEX for one forked by
``scrapy walsh-workers``, which sets it after the fork)."""

import os

from scrapy_walsh_research.spiders.targets import TargetsSpider


class Targets(TargetsSpider):
    name = "targets"
    custom_settings = {
        "ADDONS": {"scrapy_walsh_research.Addon": 0},
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }

    @classmethod
    def update_settings(cls, settings):
        """The header is read when the crawler is made, not when this module
        is imported: ``walsh-workers`` imports it once, before forking."""
        super().update_settings(settings)
        worker = os.environ.get("BENCH_WORKER", os.environ.get("WALSH_WORKER_INDEX"))
        if worker is not None:
            settings.set("DEFAULT_REQUEST_HEADERS", {"X-Bench-Worker": worker}, priority="spider")
