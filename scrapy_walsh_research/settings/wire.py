"""R4's serial wire at start-up: who sends the requests, and how many the
engine may take.

Only the wire-timed download handler
(:class:`~scrapy_walsh_research.scheduling.wire.WireTimedHTTP11DownloadHandler`)
is accepted for http and https (:func:`handler_problems`). It sends one
request at a time: a request asks for a connection only once the one before
it has its whole answer or has failed. So the engine may take up to three
requests, whose gates and reservations run while one is on the wire, but
only when that handler serves both schemes (:func:`concurrency_problems`);
with any other handler, one request in the engine is one on the wire.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.components import WIRE_HANDLER, is_subclass, loaded, name_of

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: the most requests the engine may take (one on the wire, the next ones prepared)
MAX_TAKEN = 3


def _other_handlers(settings: BaseSettings) -> list[tuple[str, type]]:
    """(scheme, handler class) for each of http and https served by a
    handler other than the wire-timed one (no handler: nothing is sent)."""
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    served = [(s, loaded(handlers[s])) for s in ("http", "https") if handlers.get(s) is not None]
    return [(scheme, cls) for scheme, cls in served if not is_subclass(cls, WIRE_HANDLER)]


def handler_problems(settings: BaseSettings) -> list[str]:
    """Each of http and https served by a handler other than the wire-timed one."""
    return [
        f"DOWNLOAD_HANDLERS[{scheme!r}] is {name_of(cls)}: only {WIRE_HANDLER} (or a "
        "subclass) is accepted for http and https. Scrapy's own HTTP/1.1 handler lets "
        "Twisted's connection pool send a request again by itself when a reused "
        "connection fails after the write, a request no gate sees, and R4 requires "
        f"every request to be paced. Set DOWNLOAD_HANDLERS[{scheme!r}] to "
        f"{WIRE_HANDLER!r}, or leave the entry out and let the add-on set it."
        for scheme, cls in _other_handlers(settings)
    ]


def concurrency_problems(settings: BaseSettings) -> list[str]:
    """R4's serial wire: the engine may take up to :data:`MAX_TAKEN` requests only when the
    wire-timed handler, which sends one at a time, serves http and https."""
    taken = settings.getint("CONCURRENT_REQUESTS")
    if not 1 <= taken <= MAX_TAKEN:
        return [
            f"CONCURRENT_REQUESTS={taken}: R4 requires serial requests. Set "
            f"CONCURRENT_REQUESTS={MAX_TAKEN} (the wire-timed handler sends one at a time; "
            "the engine prepares the next meanwhile) or lower."
        ]
    others = [scheme for scheme, _ in _other_handlers(settings)]
    if taken == 1 or not others:
        return []
    return [
        f"CONCURRENT_REQUESTS={taken} without {WIRE_HANDLER} for {' and '.join(others)}: R4 "
        "requires serial requests, and only that handler sends one at a time while the engine "
        f"takes {taken}. Set DOWNLOAD_HANDLERS to it for http and https, or "
        "CONCURRENT_REQUESTS=1."
    ]
