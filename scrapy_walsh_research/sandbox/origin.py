# mypy: disable-error-code="no-untyped-call"
# (twisted.web's resources, requests and sites have no annotations, and
# Twisted types its interfaces for the mypy-zope plugin, which reads a method
# without ``self``: the few calls through an interface go through ``Any``.)
"""A loopback origin with virtual hosts that records what it receives.

Tests and the conformance check assert on what *this* server saw (arrival
times, headers, paths), never on what the crawler believes it sent. One
listener on 127.0.0.1 serves every ``*.test`` host by its ``Host`` header;
:class:`SandboxResolver` points those names at it.

Arrival times are not this server's to take: it shares the crawler's
reactor, which on a busy machine reads a request late. Crawlers connect to
a front process of its own (:mod:`scrapy_walsh_research.sandbox.arrivals`)
that forwards each request with the time the kernel received it, so load
can only make the gaps the origin saw longer, never shorter.
"""

from __future__ import annotations

import contextlib
import itertools
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IHostnameResolver, IHostResolution
from twisted.web import resource, server
from twisted.web.http import Request as TxRequest
from zope.interface import implementer  # type: ignore[import-untyped]

from scrapy_walsh_research.sandbox.arrivals import ARRIVAL_HEADER


def _reactor() -> Any:
    """The running reactor, imported late so importing this module installs none."""
    from twisted.internet import reactor

    return reactor


@dataclass
class Reply:
    """What a route answers; ``delay`` holds the answer back (server latency);
    ``drop`` closes the connection instead, once the request has been read."""

    status: int = 200
    body: bytes | str = b""
    #: a list sends the header once per value (repeated field lines)
    headers: dict[str, str | list[str]] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False

    def encoded(self) -> bytes:
        return self.body.encode() if isinstance(self.body, str) else self.body


Handler = Callable[["Hit"], Reply]


@dataclass
class Hit:
    host: str
    path: str
    method: str
    headers: dict[str, str]
    t: float  # time.monotonic() at arrival
    uri: str = ""
    wall: float = 0.0  # time.time() at arrival
    #: the Web Bot Auth verdict, when the origin verifies signatures:
    #: "verified", "unsigned" or "invalid: <why>"
    signature: str = ""
    #: when this request began to hold the origin: its connection's opening,
    #: for a connection's first request, else its arrival (time.monotonic())
    opened: float = 0.0
    #: when its answer was written, or its connection dropped (0: not yet)
    finished: float = 0.0

    @property
    def user_agent(self) -> str | None:
        return self.headers.get("user-agent")


class Origin(resource.Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[tuple[str, str], Reply | Handler] = {}
        self.hits: list[Hit] = []
        self.inflight = 0
        self.max_inflight = 0
        #: connections opened and not yet given a request: peer -> when
        self._opened: dict[tuple[str, int], float] = {}
        #: set (a sandbox.verify.Verifier) to verify every request's signature
        self.verifier: Any = None

    def route(self, host: str, path: str, reply: Reply | Handler) -> None:
        """Answer ``GET http://host/path`` (path includes any query) with *reply*."""
        self.routes[(host.lower(), path)] = reply

    def connection_opened(self, peer: Any) -> None:
        """A connection from *peer* was opened (its first request starts then)."""
        self._opened[_peer(peer)] = time.monotonic()

    def overlapping(self) -> list[tuple[Hit, Hit]]:
        """Requests that held this origin at once: pairs whose spans from
        :attr:`Hit.opened` to :attr:`Hit.finished` overlap (a serial client
        opens no connection and sends nothing while a request is answered)."""
        spans = sorted((h for h in self.hits if h.finished), key=lambda h: h.opened)
        return [(a, b) for a, b in itertools.pairwise(spans) if b.opened < a.finished]

    def hits_for(self, host: str | None = None, path: str | None = None) -> list[Hit]:
        return [
            h
            for h in self.hits
            if (host is None or h.host == host) and (path is None or h.path == path)
        ]

    def render(self, request: TxRequest) -> Any:
        host_header = (request.getHeader("host") or "").lower()
        host = host_header.rsplit(":", 1)[0] if ":" in host_header else host_header
        uri = request.uri.decode("latin-1")
        path = urlsplit(uri).path or "/"
        query = urlsplit(uri).query
        full_path = f"{path}?{query}" if query else path
        arrived, wall = _arrival(request)
        headers = {
            k.decode("latin-1").lower(): v[-1].decode("latin-1")
            for k, v in request.requestHeaders.getAllRawHeaders()
        }
        hit = Hit(host, full_path, request.method.decode(), headers, arrived, uri, wall)
        if self.verifier is not None:
            scheme = "https" if request.isSecure() else "http"
            hit.signature = self.verifier.verify(
                hit.method, scheme, host_header, full_path, headers, now=hit.wall
            )
        opened = self._opened.pop(_peer(request.getClientAddress()), None)
        hit.opened = arrived if opened is None else min(opened, arrived)
        self.hits.append(hit)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        route = self.routes.get((host, full_path)) or self.routes.get((host, path))
        if route is None:
            reply = Reply(404, b"not found\n", {"Content-Type": "text/plain"})
        elif callable(route):
            reply = route(hit)
        else:
            reply = route

        def finish() -> None:
            self.inflight -= 1
            hit.finished = time.monotonic()
            if request.finished or request._disconnected:
                return
            if reply.drop:
                transport: Any = request.channel.transport  # see the module's mypy note
                transport.loseConnection()
                return
            request.setResponseCode(reply.status)
            for name, value in reply.headers.items():
                values = value if isinstance(value, list) else [value]
                request.responseHeaders.setRawHeaders(
                    name.encode(), [v.encode("latin-1") for v in values]
                )
            body = reply.encoded()
            if request.method != b"HEAD":
                request.write(body)
            request.finish()

        if reply.delay:
            _reactor().callLater(reply.delay, finish)
        else:
            finish()
        return server.NOT_DONE_YET


def _peer(address: Any) -> tuple[str, int]:
    return str(getattr(address, "host", "")), int(getattr(address, "port", 0))


def _arrival(request: TxRequest) -> tuple[float, float]:
    """When *request* arrived (monotonic, wall): as the front process's
    kernel stamped it (its header, taken out here: the crawler did not send
    it), else now (an https listener, which the front process cannot read)."""
    marks = request.requestHeaders.getRawHeaders(ARRIVAL_HEADER) or []
    request.requestHeaders.removeHeader(ARRIVAL_HEADER)
    if marks and not request.isSecure():  # on https only a client could have sent one
        # the front process puts its mark first; one the crawler sent comes after
        monotonic, _, wall = marks[0].decode("latin-1").partition(" ")
        with contextlib.suppress(ValueError):
            return float(monotonic), float(wall)
    return time.monotonic(), time.time()


class _Site(server.Site):
    """The origin's site, which tells it when each connection is opened."""

    def __init__(self, origin: Origin) -> None:
        super().__init__(origin)
        self._origin = origin

    def buildProtocol(self, addr: Any) -> Any:
        self._origin.connection_opened(addr)
        return super().buildProtocol(addr)


class _Front:
    """The front process of one plain-http listener (see
    :mod:`scrapy_walsh_research.sandbox.arrivals`)."""

    def __init__(self, backend_port: int) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-I",
                "-S",
                str(Path(__file__).with_name("arrivals.py")),
                str(backend_port),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"the sandbox's front process did not start: {line!r}")
        self.port = int(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


class SandboxServer:
    """The origin listening on an ephemeral loopback port (no port races).

    :meth:`listen_also` and :meth:`start_tls` add listeners that serve the
    same virtual hosts and log into the same :class:`Origin`: other origins
    (ports, https) of one host.
    """

    def __init__(self) -> None:
        self.origin = Origin()
        self.site = _Site(self.origin)
        self.site.noisy = False
        self._ports: list[Any] = []
        self._fronts: list[_Front] = []
        self.port = 0
        self.tls_port = 0

    def start(self) -> SandboxServer:
        self.port = self.listen_also()
        return self

    def listen_also(self) -> int:
        """Listen on one more loopback port; returns it. Crawlers reach it
        through a front process that stamps arrivals by the kernel's clock."""
        port = _reactor().listenTCP(0, self.site, interface="127.0.0.1")
        self._ports.append(port)
        front = _Front(int(port.getHost().port))
        self._fronts.append(front)
        return front.port

    def start_tls(self) -> int:
        """Listen for https with a fresh self-signed certificate; returns the port."""
        from twisted.internet import ssl

        key_pem, cert_pem = _self_signed()
        options = ssl.PrivateCertificate.loadPEM(key_pem + cert_pem).options()
        port = _reactor().listenSSL(0, self.site, options, interface="127.0.0.1")
        self._ports.append(port)
        self.tls_port = int(port.getHost().port)
        return self.tls_port

    def url(self, host: str, path: str = "/", *, port: int | None = None) -> str:
        return f"http://{host}:{port or self.port}{path}"

    def tls_url(self, host: str, path: str = "/") -> str:
        return f"https://{host}:{self.tls_port}{path}"

    def stop(self) -> Any:
        """Stop listening; returns a Deferred."""
        from twisted.internet.defer import DeferredList

        ports, self._ports = self._ports, []
        fronts, self._fronts = self._fronts, []
        for front in fronts:
            front.stop()
        return DeferredList([p.stopListening() for p in ports])


def _self_signed() -> tuple[bytes, bytes]:
    """A throw-away key and certificate for the loopback https listener."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sandbox.test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@implementer(IHostResolution)
class _Resolution:
    def __init__(self, name: str) -> None:
        self.name = name

    def cancel(self) -> None:  # pragma: no cover - resolution is synchronous
        pass


@implementer(IHostnameResolver)
class SandboxResolver:
    """Resolve every ``*.test`` name (RFC 2606) to 127.0.0.1 and, for a name
    taught with :meth:`teach`, fail as taught; delegate the rest.

    A name that fails resolves to no address, as Twisted's resolvers report
    every failed lookup; :meth:`lookup_error` says why, as the system
    resolver's ``socket.gaierror`` would (``EAI_NONAME``, ``EAI_AGAIN``)."""

    def __init__(self, fallback: IHostnameResolver, suffix: str = ".test") -> None:
        self.fallback: Any = fallback  # see the module's mypy note
        self.suffix = suffix
        #: name -> the ``socket.EAI_*`` code its lookup fails with
        self.taught: dict[str, int] = {}

    def teach(self, name: str, error: int | None) -> None:
        """Make lookups of *name* fail with *error* (``socket.EAI_NONAME``:
        no such name; ``socket.EAI_AGAIN``: try again), or, with None,
        answer it as before."""
        name = self._key(name)
        if error is None:
            self.taught.pop(name, None)
        else:
            self.taught[name] = error

    @staticmethod
    def _key(name: str) -> str:
        return name.lower().rstrip(".")

    def lookup_error(self, name: str) -> int | None:
        """The ``socket.EAI_*`` code a lookup of *name* fails with here, 0
        when it resolves, None for a name this resolver delegates."""
        key = self._key(name)
        if key in self.taught:
            return self.taught[key]
        if key.endswith(self.suffix):
            return 0
        return None

    def resolveHostName(
        self,
        resolutionReceiver: Any,
        hostName: str,
        portNumber: int = 0,
        addressTypes: Any = None,
        transportSemantics: str = "TCP",
    ) -> Any:
        error = self.lookup_error(hostName)
        if error is None:
            return self.fallback.resolveHostName(
                resolutionReceiver, hostName, portNumber, addressTypes, transportSemantics
            )
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        if error == 0:
            resolutionReceiver.addressResolved(IPv4Address("TCP", "127.0.0.1", portNumber))
        resolutionReceiver.resolutionComplete()
        return resolution


def install_sandbox_resolver(reactor: Any = None) -> Callable[[], None]:
    """Install :class:`SandboxResolver`; returns a function that restores the old one."""
    reactor = reactor or _reactor()
    original = reactor.nameResolver
    if isinstance(original, SandboxResolver):
        return lambda: None
    reactor.installNameResolver(SandboxResolver(original))
    return lambda: reactor.installNameResolver(original)


class SandboxDNSResolver:
    """``TWISTED_DNS_RESOLVER`` for sandbox runs: Scrapy's resolver, plus ``*.test``."""

    def __init__(self, reactor: Any, inner: Any) -> None:
        self.reactor = reactor
        self.inner = inner

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> SandboxDNSResolver:
        from scrapy.resolver import CachingThreadedResolver

        return cls(reactor, CachingThreadedResolver.from_crawler(crawler, reactor))

    def install_on_reactor(self) -> None:
        self.inner.install_on_reactor()
        install_sandbox_resolver(self.reactor)
