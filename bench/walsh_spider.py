"""This bundle: the targets spider with the one-line add-on and nothing else
(in the multi-process mode, each worker also names itself in a header, so the
origin can count requests and in-flight requests per worker)."""

import os

from scrapy_walsh_research.spiders.targets import TargetsSpider


class Targets(TargetsSpider):
    name = "targets"
    custom_settings = {
        "ADDONS": {"scrapy_walsh_research.Addon": 0},
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "DEFAULT_REQUEST_HEADERS": (
            {"X-Bench-Worker": os.environ["BENCH_WORKER"]} if "BENCH_WORKER" in os.environ else {}
        ),
    }
