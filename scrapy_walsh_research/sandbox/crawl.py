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
    crawler = Crawler(spidercls, settings)
    records: list[dict[str, Any]] = []
    crawler.signals.connect(
        lambda item, **_: records.append(item), signal=signals.item_scraped, weak=False
    )
    await crawler.crawl_async(list=str(list_file))
    return records, crawler
