"""The schemas a blocklist document must satisfy (spec §4.2).

The bundled copy of the published schema is the contract and is never
replaced: a fetched ``{}`` or an error page must not make garbage "valid".
The schema published at ``WALSH_BLOCKLIST_SCHEMA_URL`` is consulted once per
run; when it differs from the bundled copy, documents must satisfy both, so
it can only add constraints.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._runtime.marks import SCHEMA, HostBusy, internal_fetch
from scrapy_walsh_research.core.blocklist.document import (
    BlocklistError,
    UncheckableFormats,
    schema_validator,
    validate,
)
from scrapy_walsh_research.core.blocklist.schema import bundled_schema
from scrapy_walsh_research.errors import WalshConfigurationError

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext

    pass

logger = logging.getLogger(__name__)

MAX_SCHEMA_BYTES = 1024 * 1024


def load_validator(schema: Any) -> Any:
    """A validator for *schema* with every format the contract uses checked.
    A jsonschema that cannot check one stops the crawl: it would otherwise
    pass anything in that format."""
    try:
        return schema_validator(schema)
    except UncheckableFormats as exc:
        raise WalshConfigurationError(str(exc)) from None


class BlocklistSchema:
    """The bundled schema (the contract) and the published one, if it differs."""

    def __init__(self, context: CrawlContext, url: str) -> None:
        crawler = self.crawler = context.crawler
        self.marks = context.marks
        self.stats = crawler.stats
        self.url = url
        #: the published schema as bundled: the contract, never replaced
        self.contract = load_validator(bundled_schema())
        #: the schema fetched from WALSH_BLOCKLIST_SCHEMA_URL when it differs:
        #: documents must satisfy it as well, so it can only add constraints
        self.published: Any = None
        self._fetched = False

    async def ensure(self, *, max_wait: float | None) -> None:
        """Consult the published schema (spec §4.2) once, waiting at most
        *max_wait* for the operator host. It never replaces the bundled
        copy, which is the contract: a fetched ``{}`` or an error page must
        not make garbage "valid". When it differs, documents must satisfy
        both."""
        if self._fetched:
            return
        self._fetched = True
        try:
            response = await internal_fetch(
                self.marks, self.url, SCHEMA, maxsize=MAX_SCHEMA_BYTES, max_wait=max_wait
            )
            if not 200 <= response.status < 300:
                raise BlocklistError(f"HTTP {response.status}")
            schema = json.loads(response.body)
            if schema == self.contract.schema:
                return
            self.published = load_validator(schema)
        except Exception as exc:
            if isinstance(exc, HostBusy):
                self._fetched = False  # consult it when the host is ready
            # An answer that is no schema is worth a WARNING; one that could
            # not be fetched (no network, the operator's host down) loses
            # nothing: the bundled copy is the contract, the published one
            # can only add to it. The blocklist's own failure is what the
            # user is told about.
            answered = isinstance(exc, (BlocklistError, ValueError, WalshConfigurationError))
            logger.log(
                logging.WARNING if answered else logging.INFO,
                "Blocklist schema from %(url)s unusable (%(exc)s); validating with the bundled "
                "copy of the published schema.",
                {"url": self.url, "exc": exc},
            )
            self.stats.inc_value("walsh/blocklist/schema_fallback")
            return
        self.stats.inc_value("walsh/blocklist/schema_differs")
        logger.warning(
            "The blocklist schema at %(url)s differs from the bundled copy of the published "
            "schema: documents must satisfy both.",
            {"url": self.url},
        )

    def validate(self, document: Any) -> None:
        """:class:`BlocklistError` unless *document* satisfies both schemas."""
        unusable = validate(document, self.contract, self.published, self.url)
        if unusable is not None:
            self.published_unusable(unusable)

    def published_unusable(self, why: str) -> None:
        """The published schema cannot be applied (*why*): it adds nothing."""
        logger.warning(
            "The blocklist schema from %(url)s cannot be applied (%(exc)s); validating with "
            "the bundled copy only.",
            {"url": self.url, "exc": why},
        )
        self.published = None

    def names(self) -> str:
        """Which schemas documents are validated against, for the log."""
        return "bundled" if self.published is None else "bundled + published"
