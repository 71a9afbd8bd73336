"""The child process that reads, validates and indexes a large blocklist.

In the crawl process, the pure-Python work of a 10^6-entry list held the GIL
long enough to stall the reactor for 0.1-0.4 s at a time, even from a
thread, and its entries cost hundreds of MB. The crawl process
(:mod:`scrapy_walsh_research.documents.blocklist.build`) runs :func:`main` in a child
instead and maps the index file it writes.

The child imports only the pure core (no Scrapy, no Twisted, not the gate):
it starts fast and small. Everything it needs comes in its request (JSON on
stdin): ``body`` (the path of the document), ``index`` (where to write the
entries), ``url``, ``contract_name``, ``contract`` (the bundled schema),
``published`` (the fetched schema when it differs, or null), ``schema_url``,
``min_refresh`` and ``max_refresh``. The answer (JSON on stdout) is the
document without its entries, or why it was rejected, with the lines logged
about entries on the way.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from scrapy_walsh_research.core.blocklist.document import (
    BlocklistError,
    check_shape,
    refresh_seconds,
    schema_validator,
    strict_json,
    validate,
)
from scrapy_walsh_research.core.blocklist.entries import DomainSet
from scrapy_walsh_research.core.blocklist.index import write_index

#: how many of the child's log lines (entries read leniently, unusable
#: entries) are passed on; the rest are counted
CHILD_LOG_LINES = 100


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The verdict on the document *request* names, checked exactly as the
    crawl process checks a small one (the contract's outline, the bundled
    schema, the fetched schema when it differs, ``refresh``); its entries,
    read with :meth:`DomainSet.from_entries`, are written to ``index``."""
    try:
        with open(request["body"], "rb") as f:
            data = f.read()
        document = strict_json(data)  # the verdict the thread path would give
        del data
        check_shape(document, request["contract_name"])
        published = request.get("published")
        unusable = validate(
            document,
            schema_validator(request["contract"]),
            None if published is None else schema_validator(published),
            request["schema_url"],
        )
        refresh, clamped = refresh_seconds(document.get("refresh"), request["min_refresh"],
                                           request["max_refresh"])  # fmt: skip
        domains = DomainSet.from_entries(document["blocked"], source=request["url"])
        write_index(domains.entries, request["index"])
    except BlocklistError as exc:
        return {"ok": False, "error": str(exc)}
    return {
        "ok": True,
        "header": {k: v for k, v in document.items() if k != "blocked"},
        "refresh": refresh,
        "clamped": clamped,
        "unusable": unusable,
    }


class _KeepLines(logging.Handler):
    """Keeps the first :data:`CHILD_LOG_LINES` lines, counts the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[int, str]] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < CHILD_LOG_LINES:
            self.lines.append((record.levelno, record.getMessage()))
        else:
            self.dropped += 1


def main() -> None:
    """The child process: read the request on stdin, answer on stdout."""
    request = json.loads(sys.stdin.buffer.read())
    kept = _KeepLines()
    # every line a core module logs here goes to the crawl process's log
    core_logger = logging.getLogger(__name__.rpartition(".")[0])
    core_logger.addHandler(kept)
    core_logger.propagate = False
    core_logger.setLevel(logging.DEBUG)
    reply = answer(request)
    reply["log"] = kept.lines
    reply["log_dropped"] = kept.dropped
    sys.stdout.write(json.dumps(reply))
    sys.stdout.flush()
