"""This bundle: the targets spider with the one-line add-on and nothing else."""

from scrapy_walsh_research.spiders.targets import TargetsSpider


class Targets(TargetsSpider):
    name = "targets"
    custom_settings = {
        "ADDONS": {"scrapy_walsh_research.Addon": 0},
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }
