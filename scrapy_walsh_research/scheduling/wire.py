"""When a request actually leaves, for pacing "as the origin sees it".

Scrapy's slot delay runs from dispatch; a first request that spends 20 ms
opening a connection is followed by one that reuses it, and the origin sees a
gap 20 ms short (stock Scrapy: 0.982 s for a 1 s delay). This handler stamps
``meta["walsh_wire_time"]`` when the connection is handed to the request and
again each time the connection's socket accepts bytes of it, and pacing
counts from the last stamp (without the stamp, pacing falls back to counting
from the response, a safe upper bound).

As the connection is handed over, the handler checks that the host's slot
reserved for the request is still this worker's (:class:`GrantExpired`
otherwise), and the request's departure is written: its audit entry, then,
with ``WALSH_SIGNING_KEY`` set, its signature
(:class:`~scrapy_walsh_research.scheduling.departure.Departure`, asked
through :class:`OnDeparture`). How it reaches into Twisted to do so, and why,
is :mod:`scrapy_walsh_research.scheduling._twisted`.

The wire is serial: a request asks the pool for a connection (opens one,
or takes an idle keep-alive one) only once the request before it has its
whole answer or has failed (:class:`SerialWire`, one lock per crawler for
both schemes' handlers, held from before the pool is asked until the
download ends), so no connection is opened and no byte
leaves for any host while another request is in flight, whatever the engine
lets into the downloader. Scrapy's ``DOWNLOAD_TIMEOUT`` starts once the lock
is held: the wait for the wire is not counted. The engine takes the next
requests while one is on the wire (``CONCURRENT_REQUESTS=3``) so that their
gates and their hosts' reservations run meanwhile; what a gate decides while
a request waits here is checked again as it is handed its connection (its
grant, the blocklist in force, the robots.txt in force and its Visit-time
window), and again once its audit entry is written when that write
waited on a store outside the process (Redis); a request still waiting
when the run is stopped is not sent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.utils.defer import deferred_from_coro, maybe_deferred_to_future
from twisted.internet.defer import DeferredLock
from twisted.internet.error import ConnectError

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.meta import WIRE_TIME_META
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.scheduling import _twisted
from scrapy_walsh_research.scheduling.departure import Departure, SigningFailed
from scrapy_walsh_research.scheduling.pacer import Pacer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_walsh_research._runtime.context import CrawlContext

__all__ = [
    "DepartureRefused",
    "GrantExpired",
    "OnDeparture",
    "SerialWire",
    "SigningFailed",
    "WireTimedHTTP11DownloadHandler",
]


class GrantExpired(ConnectError):
    """The host's slot reserved for this request is no longer this worker's
    (its lease on a shared clock ran out before a connection was ready):
    nothing is sent; R5 retries it through pacing like a failed connect."""


class DepartureRefused(ConnectError):
    """A gate says the request may no longer leave (while it waited for the
    wire the blocklist came to block its host, a robots.txt read disallowed
    it, its Visit-time window closed): nothing is sent; it goes back
    through its gates, which decide it again."""


class SerialWire:
    """The crawler's one wire: Scrapy builds a download handler per scheme
    (http, https), and a lock of each handler's own would let an https
    request be in flight while an http one is. Every wire-timed handler of
    the crawler takes this one lock."""

    def __init__(self, context: CrawlContext) -> None:
        #: held by the request on the wire, from before it asks its pool for
        #: a connection until its answer is complete or its download failed
        self.lock = DeferredLock()


class OnDeparture(Protocol):
    """What the handler asks as a request goes onto its connection."""

    @property
    def signs(self) -> bool:
        """Whether each request is signed as it is written."""
        ...

    def logged(self, request: Request) -> Awaitable[None] | None:
        """Write *request*'s audit entry (something to await, or None)."""
        ...

    def sign(self, tx_request: Any, request: Request) -> None:
        """Sign *request* onto the request the connection writes, or raise."""
        ...


class WireTimedHTTP11DownloadHandler(InContext, HTTP11DownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        pool = _twisted.connection_pool(self)
        self._current: Request | None = None
        self._crawler = crawler
        self._departure: OnDeparture = Departure(self.context)
        #: the crawler's one wire lock, shared with its other schemes' handler
        self._wire = self.context.service(SerialWire).lock
        _twisted.on_each_connection(pool, self._on_connection)

    def _on_connection(self) -> Callable[[Any], Any]:
        """What to do with the connection the pool is asked for now: it is
        for the request being downloaded."""
        request = self._current
        return lambda connection: self._handed_over(connection, request)

    def _handed_over(self, connection: Any, request: Request | None) -> Any:
        if request is None:
            return connection
        self._check_leaving(connection, request)  # not logged as sent if it cannot be
        # the audit entry is durable before the request leaves
        written = self._departure.logged(request)
        if written is None:
            return self._send(connection, request)
        return deferred_from_coro(written).addCallback(
            lambda _: self._send_after_write(connection, request)
        )

    def _send_after_write(self, connection: Any, request: Request) -> Any:
        # again after the audit write (a Redis write can wait out an outage
        # for seconds): meanwhile the run may have been stopped, the grant
        # lost, the list in force come to block the host, the window closed
        self._check_leaving(connection, request)
        return self._send(connection, request)

    def _check_leaving(self, connection: Any, request: Request) -> None:
        """Close *connection* and raise unless *request* may leave now: the
        run is not stopping, its host's slot is still this worker's, and no
        gate's departure check denies it."""
        pacer = self.context.service(Pacer)
        host = url_host(request.url)
        try:
            # stopped while it waited for its connection: nothing is sent
            pacer.refuse_if_stopping(host, direct=self.context.marks.is_direct(request))
            if not pacer.grant_valid(host):
                # Twisted's ConnectError.__init__ has no annotations
                raise GrantExpired(  # type: ignore[no-untyped-call]
                    string=f"the reserved slot for {request.url} expired"
                )
            late = pacer.departure_denial(request)
            if late is not None:
                raise DepartureRefused(string=f"{late[0]}: {late[1]}")  # type: ignore[no-untyped-call]
        except Exception:
            connection.transport.loseConnection()
            raise

    def _send(self, connection: Any, request: Request) -> Any:
        if self._departure.signs:
            _twisted.rewrite_next_request(
                connection, lambda tx_request: self._departure.sign(tx_request, request)
            )
        _twisted.send_once_written(connection)
        request.meta[WIRE_TIME_META] = time.monotonic()
        _twisted.stamp_sends(connection, request)
        return connection

    def _refuse_if_stopping(self, request: Request) -> None:
        direct = self.context.marks.is_direct(request)
        self.context.service(Pacer).refuse_if_stopping(url_host(request.url), direct=direct)

    async def download_request(self, request: Request) -> Response:
        # Taken before the pool is asked for a connection, and before
        # Scrapy's download timeout starts (inside the call below).
        granted: list[object] = []
        waiting = self._wire.acquire().addCallback(granted.append)
        try:
            await maybe_deferred_to_future(waiting)
        except BaseException:
            # cancelled while waiting (the lock drops the wait), or just as
            # the lock came (it is given back)
            if granted:
                self._wire.release()
            raise
        try:
            # a request that waited here while the run was stopping is not sent
            self._refuse_if_stopping(request)
            # The pool is asked for a connection synchronously inside the
            # call: the request set here is the one the connection is for.
            self._current = request
            return await super().download_request(request)
        finally:
            self._current = None
            self._wire.release()
