"""The ``targets`` spider: fetch a declared list, one record per line.

``scrapy crawl targets -a list=urls.txt``. Blank lines and ``#`` comments are
skipped; every other line yields exactly one record, whatever happens to it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scrapy
from scrapy.spidermiddlewares.httperror import HttpError

from scrapy_walsh_research.errors import WalshDenied
from scrapy_walsh_research.records import new_record, response_metadata
from scrapy_walsh_research.retry import GAVE_UP_META
from scrapy_walsh_research.urls import canonical_url, is_http_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

TARGET_META = "walsh_target"


class TargetsSpider(scrapy.Spider):
    name = "targets"

    def __init__(self, list: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not list:
            raise ValueError(
                "the targets spider needs a URL list: scrapy crawl targets -a list=FILE"
            )
        self.list_path = Path(list)
        if not self.list_path.is_file():
            raise ValueError(f"URL list {str(self.list_path)!r} does not exist or is not a file")

    async def start(self) -> AsyncIterator[Any]:
        seen: dict[str, int] = {}
        with self.list_path.open(encoding="utf-8", errors="replace") as lines:
            for lineno, raw in enumerate(lines, 1):
                text = raw.strip()
                if not text or text.startswith("#"):
                    continue
                if not is_http_url(text):
                    logger.warning(
                        "%(file)s line %(line)d: not an http(s) URL, skipped: %(text)r",
                        {"file": self.list_path, "line": lineno, "text": text[:200]},
                    )
                    yield self._record(
                        line=lineno,
                        url=text,
                        canonical_url=None,
                        outcome="invalid",
                        reason="not an absolute http(s) URL",
                    )
                    continue
                canon = canonical_url(text)
                if canon in seen:
                    yield self._record(
                        line=lineno,
                        url=text,
                        canonical_url=canon,
                        outcome="duplicate",
                        reason=f"same canonical URL as line {seen[canon]}",
                    )
                    continue
                seen[canon] = lineno
                yield scrapy.Request(
                    text,
                    callback=self.parse_target,
                    errback=self.target_failed,
                    dont_filter=True,  # dedup is by canonical URL, above
                    meta={TARGET_META: {"line": lineno, "url": text, "canonical_url": canon}},
                )

    def parse_target(self, response: Response) -> Any:
        target = response.meta[TARGET_META]
        yield self._record(**target, outcome="fetched", **response_metadata(response))

    def target_failed(self, failure: Failure) -> Any:
        request = failure.request  # type: ignore[attr-defined]
        target = request.meta[TARGET_META]
        exc = failure.value
        final_url = request.url
        if isinstance(exc, WalshDenied):
            yield self._record(
                **target,
                outcome=exc.outcome,
                rule=exc.rule,
                reason=exc.reason,
                final_url=final_url,
            )
        elif isinstance(exc, HttpError):
            meta = response_metadata(exc.response)
            outcome = "not_modified" if exc.response.status == 304 else "failed"
            reason = None
            if outcome != "not_modified":
                reason = request.meta.get(GAVE_UP_META) or f"HTTP {exc.response.status}"
            yield self._record(**target, outcome=outcome, reason=reason, **meta)
        else:
            yield self._record(
                **target,
                outcome="failed",
                final_url=final_url,
                reason=f"{type(exc).__name__}: {exc}",
            )

    def _record(self, **fields: Any) -> dict[str, Any]:
        record = new_record(**fields)
        self.crawler.stats.inc_value(f"walsh/outcome/{record['outcome']}")
        return record
