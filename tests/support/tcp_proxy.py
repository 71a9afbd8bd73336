"""One TCP endpoint on loopback that forwards to a server the test chooses,
and can be switched to another: the one address a managed Redis or a
Sentinel-aware DNS name gives clients, which points at the new primary
after a failover (Twisted's port forwarder, in the test's reactor)."""

from __future__ import annotations

from typing import Any

from twisted.protocols import portforward


def _reactor() -> Any:
    """The running reactor, imported late so importing this module installs none."""
    from twisted.internet import reactor

    return reactor


class _Forward(portforward.ProxyServer):
    noisy = False

    def connectionMade(self) -> None:
        self.factory.open.add(self)
        super().connectionMade()

    def connectionLost(self, reason: Any) -> None:
        self.factory.open.discard(self)
        super().connectionLost(reason)


class _Factory(portforward.ProxyFactory):
    protocol = _Forward
    noisy = False

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.open: set[_Forward] = set()


class TcpProxy:
    """``redis://127.0.0.1:<port>/0`` for the workers, forwarded to the port
    :meth:`point_at` last named."""

    def __init__(self, target_port: int) -> None:
        self.factory = _Factory("127.0.0.1", target_port)
        self._listening: Any = None

    def start(self) -> TcpProxy:
        self._listening = _reactor().listenTCP(0, self.factory, interface="127.0.0.1")
        return self

    @property
    def port(self) -> int:
        return int(self._listening.getHost().port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def point_at(self, port: int) -> None:
        """New connections go to *port*; the ones open are cut (their server
        is gone, or is no longer the one clients should reach)."""
        self.factory.port = port
        for conn in list(self.factory.open):
            conn.transport.loseConnection()

    def stop(self) -> Any:
        for conn in list(self.factory.open):
            conn.transport.loseConnection()
        return self._listening.stopListening() if self._listening is not None else None
