"""An ordinary Scrapy project made a Walsh-Research bot by one line: ADDONS.

The settings below are what ``scrapy startproject`` writes; the add-on
overrides nothing you set explicitly, and the start-up check refuses to
crawl if what you set breaks the contract.
"""

BOT_NAME = "example"
SPIDER_MODULES = ["example.spiders"]
NEWSPIDER_MODULE = "example.spiders"

ADDONS = {"scrapy_walsh_research.Addon": 0}

ROBOTSTXT_OBEY = True  # harmless: the add-on replaces Scrapy's robots.txt middleware
# No DOWNLOAD_DELAY: Walsh pacing spaces requests per host (R4); Scrapy's own
# slot delay would only add jitter on top (the start-up check warns about it).
FEED_EXPORT_ENCODING = "utf-8"
