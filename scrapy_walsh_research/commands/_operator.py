"""What the operator's commands share: they run outside a project as well
as in one, start no crawler process of Scrapy's, and speak only when there is
something to say."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy.commands import ScrapyCommand
from scrapy.exceptions import UsageError

from scrapy_walsh_research.errors import WalshConfigurationError

if TYPE_CHECKING:
    from scrapy_walsh_research.settings.walsh import WalshSettings


class OperatorCommand(ScrapyCommand):
    requires_project = False
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_LEVEL": "WARNING"}

    @cached_property
    def walsh(self) -> WalshSettings:
        """The ``WALSH_`` settings the command was given, typed, read once; a
        value no crawl would accept is refused as a crawl refuses it: one
        message naming the setting, no traceback, exit status 1."""
        # imported here, not above: Scrapy imports every command module on every run
        from scrapy_walsh_research.settings.walsh import WalshSettings

        assert self.settings is not None
        try:
            return WalshSettings.from_settings(self.settings)
        except WalshConfigurationError as exc:
            raise UsageError(str(exc), print_help=False) from None
