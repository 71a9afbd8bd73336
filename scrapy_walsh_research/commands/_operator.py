"""What the operator's commands share: they run outside a project as well
as in one, start no crawler process of Scrapy's, and speak only when there is
something to say."""

from __future__ import annotations

from typing import Any, ClassVar

from scrapy.commands import ScrapyCommand


class OperatorCommand(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}
