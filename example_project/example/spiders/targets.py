"""``scrapy crawl targets -a list=urls.txt``: the bundle's spider, in this project.

Scrapy lists only spiders defined in the project's own modules, hence the
subclass; it changes nothing.
"""

from scrapy_walsh_research.spiders.targets import TargetsSpider as _BundledTargets


class TargetsSpider(_BundledTargets):
    name = "targets"
