"""When a request actually leaves, for pacing "as the origin sees it".

Scrapy's slot delay runs from dispatch; a first request that spends 20 ms
opening a connection is followed by one that reuses it, and the origin sees a
gap 20 ms short (stock Scrapy: 0.982 s for a 1 s delay). This handler stamps
``meta["walsh_wire_time"]`` when the connection is handed to the request and
again each time the connection's socket accepts bytes of it, and pacing
counts from the last stamp. Handing over is not leaving: Twisted buffers the
request and sends it on a later reactor turn, so on a busy reactor the bytes
left up to a hundred milliseconds after the handover, and the next request,
paced from the handover, reached the origin less than a second after them.

It also turns off the pool's ``retryAutomatically``: Twisted's connection
pool otherwise re-sends a request on a new connection, at once and unseen by
any middleware, when a reused keep-alive connection fails after the request
was written (the origin then receives it twice, a millisecond apart). With
it off, that failure reaches the R5 gate as ``ResponseNeverReceived`` and a
retry goes through pacing like any other.

With ``WALSH_SIGNING_KEY`` set, the same moment is when each request is
signed (:mod:`scrapy_walsh_research.identity.signing`): the connection's ``request``
is wrapped for that one call, so the signature's ``created`` is when the
request goes onto the connection, after any pacing wait, and every hop and
retry gets its own. A request that cannot be signed is not sent.

It reaches into ``HTTP11DownloadHandler._pool`` (private; no public hook
exists). That use is confined to this module, checked when the handler is
built, and covered by ``tests/test_r4_pacing.py``; without the stamp, pacing
falls back to counting from the response, a safe upper bound.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.error import ConnectError

from scrapy_walsh_research._runtime.context import InContext
from scrapy_walsh_research._runtime.meta import WIRE_TIME_META
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.identity.signing import SIGNATURE_HEADERS
from scrapy_walsh_research.scheduling.pacer import Pacer
from scrapy_walsh_research.settings.signing import request_signer

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class GrantExpired(ConnectError):
    """The host's slot reserved for this request is no longer this worker's
    (its lease on a shared clock ran out before a connection was ready):
    nothing is sent; R5 retries it through pacing like a failed connect."""


class SigningFailed(IgnoreRequest):
    """Signing is on and this request could not be signed: it is not sent
    (fail closed) and its line is recorded ``failed`` with the reason."""


class WireTimedHTTP11DownloadHandler(InContext, HTTP11DownloadHandler):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        pool = getattr(self, "_pool", None)
        if (
            pool is None
            or not hasattr(pool, "getConnection")
            or not hasattr(pool, "retryAutomatically")
        ):
            raise RuntimeError(
                "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler no longer has "
                "_pool.getConnection / _pool.retryAutomatically; "
                "scrapy_walsh_research.scheduling.wire needs updating for this Scrapy."
            )
        pool.retryAutomatically = False
        self._current: Request | None = None
        self._crawler = crawler
        self._signer = request_signer(crawler.settings)
        self._audit = self.context.audit
        self._audit.signing_keyid(self._signer.keyid if self._signer is not None else None)
        self._marks = self.context.marks
        original = pool.getConnection

        def get_connection(key: Any, endpoint: Any) -> Any:
            d = original(key, endpoint)
            request = self._current

            def check_grant(connection: Any) -> None:
                assert request is not None
                if not self._grant_valid(request):
                    connection.transport.loseConnection()
                    # Twisted's ConnectError.__init__ has no annotations
                    raise GrantExpired(  # type: ignore[no-untyped-call]
                        string=f"the reserved slot for {request.url} expired"
                    )

            def send(connection: Any) -> Any:
                assert request is not None
                # again after the audit write (a Redis write can wait out an
                # outage): the grant must still be ours as the request leaves
                check_grant(connection)
                if self._signer is not None:
                    self._sign_on(connection, request)
                request.meta[WIRE_TIME_META] = time.monotonic()
                _stamp_sends(connection, request)
                return connection

            def stamp(connection: Any) -> Any:
                if request is None:
                    return connection
                check_grant(connection)  # not logged as sent if it cannot be
                # the audit entry is durable before the request leaves
                written = self._audit.sent(request, self._kind(request))
                if written is None:
                    return send(connection)
                return deferred_from_coro(written).addCallback(lambda _: send(connection))

            return d.addCallback(stamp)

        pool.getConnection = get_connection

    def _kind(self, request: Request) -> str:
        """What the audit log calls this request: the bundle's own (robots,
        blocklist, schema, llms), a target, a redirect hop or a retry."""
        purpose = self._marks.purpose(request, quiet=True) or "other"
        if request.meta.get("retry_times"):
            return f"{purpose} retry"
        if request.meta.get("redirect_times"):
            return f"{purpose} hop"
        return purpose

    def _sign_on(self, connection: Any, request: Request) -> None:
        """Sign *request* as the connection writes it (its next ``request``
        call), replacing any ``Signature*`` headers it carried."""
        signer = self._signer
        assert signer is not None

        def request_once(tx_request: Any) -> Any:
            del connection.request  # back to the class's method
            headers: dict[str, str] = {}
            try:
                signer.sign_request(tx_request.method.decode("ascii"), request.url, headers)
            except Exception as exc:
                connection.transport.loseConnection()
                self._crawler.stats.inc_value("walsh/signing/failed")
                raise SigningFailed(
                    f"not sent: signing is on (WALSH_SIGNING_KEY) and {request.url} could not "
                    f"be signed ({type(exc).__name__}: {exc})"
                ) from exc
            for name in SIGNATURE_HEADERS:
                tx_request.headers.removeHeader(name)
            for name, value in headers.items():
                tx_request.headers.setRawHeaders(name, [value])
            self._crawler.stats.inc_value("walsh/signing/signed")
            return connection.request(tx_request)

        connection.request = request_once

    def _grant_valid(self, request: Request) -> bool:
        return self.context.service(Pacer).grant_valid(url_host(request.url))

    async def download_request(self, request: Request) -> Response:
        # Requests are serial (start-up check), so the request being
        # downloaded is the one that asks the pool for a connection next.
        self._current = request
        return await super().download_request(request)


def _stamp_sends(connection: Any, request: Request) -> None:
    """Stamp *request* each time the socket under *connection* accepts bytes.

    The socket is the innermost transport with ``writeSomeData`` (under TLS,
    the TCP connection below the TLS protocol). Its ``writeSomeData`` is
    wrapped once per connection; the wrapper stamps whichever request holds
    the connection now. Without such a transport the handover stamp stands.
    """
    transport = getattr(connection, "transport", None)
    while transport is not None and not hasattr(transport, "writeSomeData"):
        transport = getattr(transport, "transport", None)
    if transport is None:
        return
    if not getattr(transport, "_walsh_stamps_sends", False):
        original = transport.writeSomeData

        def write_some_data(data: Any) -> Any:
            sent = original(data)
            ref = getattr(transport, "_walsh_request", None)
            holder = ref() if ref is not None else None
            if holder is not None and isinstance(sent, int) and sent > 0:
                holder.meta[WIRE_TIME_META] = time.monotonic()
            return sent

        transport.writeSomeData = write_some_data
        transport._walsh_stamps_sends = True
    transport._walsh_request = weakref.ref(request)
