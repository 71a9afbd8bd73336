"""Signed identity at its edges, from an adversarial review: https, what the
origin reconstructs for @target-uri (default ports, fragments), a slow TLS
handshake, and key paths that are not files. Judged at the origin's verifier
or at start-up."""

from __future__ import annotations

import pytest_twisted

from scrapy_walsh_research.sandbox import Reply
from tests.support.crawling import crawl
from tests.test_r1_signed_identity import signing_settings

ROBOTS = Reply(200, "User-agent: *\nAllow: /\n")


def verdicts(server):
    return [(h.host, h.path, h.signature) for h in server.origin.hits]


@pytest_twisted.ensureDeferred
async def test_https_target_is_signed_and_verifies(server, tmp_path):
    server.start_tls()
    server.origin.route("s.test", "/robots.txt", ROBOTS)
    server.origin.route("s.test", "/x", Reply(200, "x"))
    settings, _ = signing_settings(server, tmp_path)
    await crawl(settings, [server.tls_url("s.test", "/x")], tmp_path)
    assert server.origin.hits_for("s.test", "/x")
    assert {h.signature for h in server.origin.hits} == {"verified"}, verdicts(server)


@pytest_twisted.ensureDeferred
async def test_target_uri_with_an_explicit_default_port_verifies_through_a_proxy(
    server, tmp_path, monkeypatch
):
    """With @target-uri covered, a URL spelling its default port
    (http://d.test:80/x) is signed as the origin reconstructs it (Host: d.test)."""
    from tests.support.proxy import RecordingProxy

    proxy = RecordingProxy(server.port).start()
    for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", proxy.url)
    try:
        server.origin.route("d.test", "/robots.txt", ROBOTS)
        server.origin.route("d.test", "/x", Reply(200, "x"))
        settings, _ = signing_settings(server, tmp_path, WALSH_SIGNATURE_COMPONENTS=["@target-uri"])
        await crawl(settings, ["http://d.test:80/x"], tmp_path)
    finally:
        await proxy.stop()
    assert server.origin.hits_for("d.test", "/x"), verdicts(server)
    assert {h.signature for h in server.origin.hits} == {"verified"}, verdicts(server)


@pytest_twisted.ensureDeferred
async def test_target_uri_of_a_url_whose_fragment_ends_in_a_question_mark_verifies(
    server, tmp_path
):
    """The fragment is never sent, so it is never signed (a "?" in it once
    made the signed target URI end in "?")."""
    server.origin.route("q.test", "/robots.txt", ROBOTS)
    server.origin.route("q.test", "/x", Reply(200, "x"))
    settings, _ = signing_settings(server, tmp_path, WALSH_SIGNATURE_COMPONENTS=["@target-uri"])
    await crawl(settings, [server.url("q.test", "/x#why?")], tmp_path)
    assert server.origin.hits_for("q.test", "/x"), verdicts(server)
    assert {h.signature for h in server.origin.hits} == {"verified"}, verdicts(server)


def _slow_tls_front(upstream_port: int, delay: float):
    """A TCP forwarder to the sandbox's TLS listener that holds the server's
    side of each new connection (its TLS handshake answer) for *delay* s."""
    from twisted.internet import reactor
    from twisted.protocols import portforward

    class Client(portforward.ProxyClient):
        def connectionMade(self) -> None:
            self._held: list[bytes] | None = []
            reactor.callLater(delay, self._release)
            super().connectionMade()

        def _release(self) -> None:
            held, self._held = self._held, None
            if self.peer is not None and self.peer.transport is not None:
                for chunk in held or []:
                    self.peer.transport.write(chunk)

        def dataReceived(self, data: bytes) -> None:
            if self._held is not None:
                self._held.append(data)
            else:
                super().dataReceived(data)

    class ClientFactory(portforward.ProxyClientFactory):
        protocol = Client

    class Server(portforward.ProxyServer):
        clientProtocolFactory = ClientFactory

    factory = portforward.ProxyFactory("127.0.0.1", upstream_port)
    factory.protocol = Server
    factory.noisy = False
    return reactor.listenTCP(0, factory, interface="127.0.0.1")


@pytest_twisted.ensureDeferred
async def test_a_slow_tls_handshake_does_not_expire_the_signature(server, tmp_path):
    """Over https the connection is handed to the request at TCP connect,
    before the TLS handshake, and the handshake's time comes out of the
    signature's life: the shortest life allowed (10 s) outlives a slow one."""
    server.start_tls()
    front = _slow_tls_front(server.tls_port, delay=2.5)
    port = front.getHost().port
    try:
        server.origin.route("t.test", "/robots.txt", ROBOTS)
        server.origin.route("t.test", "/x", Reply(200, "x"))
        settings, _ = signing_settings(server, tmp_path, WALSH_SIGNATURE_TTL=10)
        await crawl(settings, [f"https://t.test:{port}/x"], tmp_path)
    finally:
        await front.stopListening()
    assert server.origin.hits_for("t.test"), verdicts(server)
    assert {h.signature for h in server.origin.hits} == {"verified"}, verdicts(server)


def test_a_key_path_that_is_not_a_regular_file_is_refused_not_waited_on(tmp_path):
    """A FIFO (mode 0600) at WALSH_SIGNING_KEY is refused at start-up, naming
    the setting, not read (a read would wait forever)."""
    import os
    import threading

    from scrapy.settings import Settings

    from scrapy_walsh_research.errors import WalshConfigurationError
    from scrapy_walsh_research.settings.check import check_settings

    fifo = tmp_path / "key.pem"
    os.mkfifo(fifo, 0o600)
    settings = Settings({"ADDONS": {"scrapy_walsh_research.Addon": 0}})
    settings.set("WALSH_SIGNING_KEY", str(fifo))
    outcome: list[BaseException | None] = []

    def check() -> None:
        try:
            check_settings(settings)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(3)
    hung = worker.is_alive()
    if hung:  # release the blocked reader: a writer that closes at once gives it EOF
        os.close(os.open(fifo, os.O_WRONLY))
        worker.join(3)
    assert not hung, "start-up blocked reading WALSH_SIGNING_KEY (a FIFO) instead of refusing"
    assert isinstance(outcome[0], WalshConfigurationError)
    assert "WALSH_SIGNING_KEY" in str(outcome[0])


class _Tunnel:
    """A forward proxy that only speaks CONNECT: it logs each authority it is
    asked to tunnel to and relays bytes to the sandbox's TLS port, so the
    origin sees TLS from the crawler, as behind a real https proxy."""

    def __init__(self, tls_port: int) -> None:
        from twisted.internet import protocol, reactor
        from twisted.protocols import portforward

        self.seen: list[str] = []
        seen = self.seen

        class Server(portforward.ProxyServer):
            clientProtocolFactory = portforward.ProxyClientFactory

            def connectionMade(self) -> None:
                self.head = b""

            def dataReceived(self, data: bytes) -> None:
                if self.peer is not None:
                    self.peer.transport.write(data)
                    return
                self.head += data
                if b"\r\n\r\n" not in self.head:
                    return
                line = self.head.split(b"\r\n", 1)[0].decode("latin-1")
                seen.append(line)
                client = self.clientProtocolFactory()
                client.setServer(self)
                reactor.connectTCP("127.0.0.1", tls_port, client)

            def setPeer(self, peer) -> None:  # the upstream connection is up
                self.peer = peer
                self.transport.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        factory = protocol.Factory.forProtocol(Server)
        factory.noisy = False
        self._port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.url = f"http://127.0.0.1:{self._port.getHost().port}"

    def stop(self):
        return self._port.stopListening()


@pytest_twisted.ensureDeferred
async def test_https_through_a_connect_proxy_is_signed_for_the_target_authority(
    server, tmp_path, monkeypatch
):
    """Behind an https proxy the request travels inside a CONNECT tunnel: the
    signature (made at handover, inside the tunnel) still names the target's
    authority, and the origin verifies it."""
    server.start_tls()
    tunnel = _Tunnel(server.tls_port)
    for name in ("no_proxy", "NO_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("https_proxy", tunnel.url)
    try:
        server.origin.route("t.test", "/robots.txt", ROBOTS)
        server.origin.route("t.test", "/x", Reply(200, "x"))
        settings, _ = signing_settings(server, tmp_path)
        await crawl(settings, [server.tls_url("t.test", "/x")], tmp_path)
    finally:
        await tunnel.stop()
    assert any(line.startswith(f"CONNECT t.test:{server.tls_port} ") for line in tunnel.seen), (
        tunnel.seen
    )
    assert server.origin.hits_for("t.test", "/x"), verdicts(server)
    assert {h.signature for h in server.origin.hits} == {"verified"}, verdicts(server)
