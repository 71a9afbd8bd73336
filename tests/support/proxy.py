"""A forward HTTP proxy on loopback that records each absolute URI it is
asked for (the gates and the signature behind a proxy: the tests only)."""

from __future__ import annotations

from typing import Any


def _reactor() -> Any:
    """The running reactor, imported late so importing this module installs none."""
    from twisted.internet import reactor

    return reactor


class _LoopbackReactor:
    """Lets twisted.web.proxy connect every upstream to the loopback origin."""

    def __init__(self, port: int) -> None:
        self.port = port

    def connectTCP(self, host: str, port: int, factory: Any, *a: Any, **kw: Any) -> Any:
        return _reactor().connectTCP("127.0.0.1", self.port, factory, *a, **kw)


class RecordingProxy:
    """A forward HTTP proxy that logs each absolute URI it is asked for."""

    def __init__(self, origin_port: int) -> None:
        from twisted.web import proxy  # imports the reactor: only once one runs

        self.seen: list[str] = []
        seen = self.seen
        loopback = _LoopbackReactor(origin_port)

        class _Request(proxy.ProxyRequest):
            def __init__(self, channel: Any, queued: Any = None) -> None:
                super().__init__(channel, queued, reactor=loopback)

            def process(self) -> None:
                seen.append(self.uri.decode("latin-1"))
                super().process()

        class _Proxy(proxy.Proxy):
            # a ProxyRequest built with the loopback reactor; its narrower
            # __init__ is what mypy objects to
            requestFactory = _Request  # type: ignore[assignment]

        from twisted.web import http

        self.factory = http.HTTPFactory()
        self.factory.protocol = _Proxy  # type: ignore[assignment]
        self.factory.noisy = False
        self._port: Any = None

    def start(self) -> RecordingProxy:
        self._port = _reactor().listenTCP(0, self.factory, interface="127.0.0.1")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port.getHost().port}"

    def stop(self) -> Any:
        """Stop listening; returns a Deferred."""
        port, self._port = self._port, None
        return port.stopListening() if port is not None else None
