"""What the operator's commands share: they run outside a project as well
as in one, start no crawler process of Scrapy's, and speak only when there is
something to say."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy.commands import ScrapyCommand

if TYPE_CHECKING:
    from scrapy_walsh_research.settings.walsh import WalshSettings


class OperatorCommand(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    @cached_property
    def walsh(self) -> WalshSettings:
        """The ``WALSH_`` settings the command was given, typed, read once."""
        # imported here, not above: Scrapy imports every command module on every run
        from scrapy_walsh_research.settings.walsh import WalshSettings

        assert self.settings is not None
        return WalshSettings.from_settings(self.settings)
