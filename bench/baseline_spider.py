"""Stock Scrapy, as close to the contract as built-in settings get: serial,
1 s per-host delay, no jitter, robots.txt on, the exact User-Agent."""

import scrapy


class Targets(scrapy.Spider):
    name = "targets"
    custom_settings = {
        "CONCURRENT_REQUESTS": 1,
        "DOWNLOAD_DELAY": 1.0,
        "DOWNLOAD_DELAY_JITTER": 0,
        "ROBOTSTXT_OBEY": True,
        "ROBOTSTXT_USER_AGENT": "Walsh-Research",
        "USER_AGENT": "Mozilla/5.0 (compatible; Walsh-Research/1.0; +https://wal.sh/bot/)",
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(self, list=None, **kw):
        super().__init__(**kw)
        self.list = list

    async def start(self):
        with open(self.list) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    yield scrapy.Request(line, callback=self.parse)

    def parse(self, response):
        yield {"url": response.url, "status": response.status}
