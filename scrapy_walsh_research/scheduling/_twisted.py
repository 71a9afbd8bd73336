"""The three places the wire-timed handler reaches into Twisted, and why.

No public hook exists for any of them; each is confined to this module,
checked when the handler is built (:func:`connection_pool`) or tolerant of
its absence (:func:`stamp_sends`), and covered by ``tests/test_r4_pacing.py``
and ``tests/test_r1_signed_identity.py``:

* the connection pool of Scrapy's ``HTTP11DownloadHandler`` (its private
  ``_pool``): its ``retryAutomatically`` is turned off, and its
  ``getConnection`` wrapped so that the handler sees each connection as it
  is handed to a request (:func:`connection_pool`, :func:`on_each_connection`);
* a connection's ``request``, wrapped for its next call, so that a request
  is signed as it is written (:func:`rewrite_next_request`);
* the socket's ``writeSomeData``, wrapped once per connection, so that a
  request is stamped each time its bytes leave (:func:`stamp_sends`);
* the socket's ``doWrite``, called once a request is written, so that its
  bytes leave at once rather than on the reactor's next turn
  (:func:`send_once_written`).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._runtime.meta import WIRE_TIME_META

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy import Request
    from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler


def connection_pool(handler: HTTP11DownloadHandler) -> Any:
    """*handler*'s connection pool, with ``retryAutomatically`` off.

    Twisted's pool otherwise re-sends a request on a new connection, at once
    and unseen by any middleware, when a reused keep-alive connection fails
    after the request was written (the origin then receives it twice, a
    millisecond apart). With it off, that failure reaches the R5 gate as
    ``ResponseNeverReceived`` and a retry goes through pacing like any other.
    A Scrapy whose handler no longer has the pool fails here, at start-up."""
    pool = getattr(handler, "_pool", None)
    if (
        pool is None
        or not hasattr(pool, "getConnection")
        or not hasattr(pool, "retryAutomatically")
    ):
        raise RuntimeError(
            "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler no longer has "
            "_pool.getConnection / _pool.retryAutomatically; "
            "scrapy_walsh_research.scheduling._twisted needs updating for this Scrapy."
        )
    pool.retryAutomatically = False
    return pool


def on_each_connection(pool: Any, hook_for_now: Callable[[], Callable[[Any], Any]]) -> None:
    """Call ``hook_for_now()`` each time *pool* is asked for a connection,
    and the hook it returns with the connection once it is ready (its result,
    a Deferred too, is what the request is given).

    Handing a connection to a request is the first moment the request is
    known to go out: Scrapy's slot delay runs from dispatch, before a
    connection is opened or reused, and no later hook exists."""
    original = pool.getConnection

    def get_connection(key: Any, endpoint: Any) -> Any:
        hook = hook_for_now()
        return original(key, endpoint).addCallback(hook)

    pool.getConnection = get_connection


def rewrite_next_request(connection: Any, rewrite: Callable[[Any], None]) -> None:
    """Let *rewrite* change the next request *connection* writes (Twisted's
    ``Request``: its headers), just before it is written. If *rewrite*
    raises, the connection is closed and nothing is written.

    The request a connection writes is built by Twisted from Scrapy's, after
    every middleware and any pacing wait; a header that must say when the
    request went out (a signature's ``created``) can only be set here."""

    def request_once(tx_request: Any) -> Any:
        del connection.request  # back to the class's method
        try:
            rewrite(tx_request)
        except Exception:
            connection.transport.loseConnection()
            raise
        return connection.request(tx_request)

    connection.request = request_once


def _socket_of(connection: Any) -> Any:
    """The innermost transport under *connection* (the one with
    ``writeSomeData``: under TLS, the TCP connection), or None."""
    transport = getattr(connection, "transport", None)
    while transport is not None and not hasattr(transport, "writeSomeData"):
        transport = getattr(transport, "transport", None)
    return transport


def send_once_written(connection: Any) -> None:
    """Have the request *connection* writes next (its next ``request``
    call, after a rewrite's, if any) handed to the socket at once.

    Twisted buffers a write and sends it when the reactor next finds the
    socket writable, after every callback already due on that turn. The
    request is handed its connection as the answer before it completes, and
    that answer's processing (middlewares, items, records) runs on the same
    turn: sent now, the request is out while it runs. A request with a body
    producer, or a connection closing, is left to the reactor; a write that
    fails here leaves the data buffered for the reactor, which meets the
    same failure and closes the connection."""
    inner = vars(connection).get("request")  # a rewrite's one-call wrapper, if any

    def request_then_send(tx_request: Any) -> Any:
        if inner is None:
            del connection.request  # back to the class's method
            result = connection.request(tx_request)
        else:
            connection.request = inner  # it puts the class's method back itself
            result = inner(tx_request)
        transport = _socket_of(connection)
        if (
            transport is not None
            and hasattr(transport, "doWrite")
            and getattr(transport, "producer", None) is None
            and not getattr(transport, "disconnecting", True)
            and getattr(transport, "connected", False)
        ):
            transport.doWrite()
        return result

    connection.request = request_then_send


def stamp_sends(connection: Any, request: Request) -> None:
    """Stamp *request* (``meta["walsh_wire_time"]``) each time the socket
    under *connection* accepts bytes of it.

    Handing over is not leaving: Twisted buffers the request and sends it on
    a later reactor turn, so on a busy reactor the bytes leave up to a
    hundred milliseconds after the handover; pacing counts from the last
    stamp. The socket is the innermost transport with ``writeSomeData``
    (under TLS, the TCP connection below the TLS protocol). Its
    ``writeSomeData`` is wrapped once per connection; the wrapper stamps
    whichever request holds the connection now. Without such a transport the
    handover stamp stands.
    """
    transport = _socket_of(connection)
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
