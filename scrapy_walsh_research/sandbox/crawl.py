"""Run the targets spider over a list of lines and collect its records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.crawler import Crawler

if TYPE_CHECKING:
    from pathlib import Path

    from scrapy.settings import Settings


async def crawl_list(
    spidercls: type, settings: Settings | dict[str, Any], lines: list[str], work: Path
) -> tuple[list[dict[str, Any]], Crawler]:
    """Write *lines* as the URL list, crawl it (an asyncio coroutine), return the records."""
    list_file = work / "urls.txt"
    list_file.write_text("\n".join(lines) + "\n")
    return await crawl_spider(spidercls, settings, list=str(list_file))


async def crawl_spider(
    spidercls: type, settings: Settings | dict[str, Any], **spider_args: Any
) -> tuple[list[dict[str, Any]], Crawler]:
    """Crawl with *spider_args* (an asyncio coroutine); return the records."""
    crawler = Crawler(spidercls, settings)
    records: list[dict[str, Any]] = []
    crawler.signals.connect(
        lambda item, **_: records.append(item), signal=signals.item_scraped, weak=False
    )
    await crawler.crawl_async(**spider_args)
    return records, crawler
