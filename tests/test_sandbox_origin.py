"""The sandbox origin every spacing judgment rests on: what it says arrived,
and when, is what a site would have seen, however busy the crawler's
process is (the tests and the conformance check share its reactor)."""

from __future__ import annotations

import socket
import ssl
import time

import pytest_twisted
from twisted.internet import reactor, threads

from scrapy_walsh_research.sandbox import Reply, SandboxServer


def _recv(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = sock.recv(65536)
    assert data, "the connection closed"
    return data


def _get(sock: socket.socket, host: str, path: str, extra: bytes = b"") -> bytes:
    """One request on *sock*; returns the response's body (the routes here
    set Content-Length: no chunked reading needed)."""
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path.encode(), host.encode(), extra))
    data = b""
    while b"\r\n\r\n" not in data:
        data += _recv(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += _recv(sock)
    return body


@pytest_twisted.ensureDeferred
async def test_a_busy_crawler_reactor_does_not_make_a_gap_look_shorter(server: SandboxServer):
    """Two requests sent 1 s apart, the first while the reactor the origin
    shares is held for 0.4 s (a loaded machine): an origin stamping on that
    reactor saw them 0.6 s apart; the origin says 1 s."""
    server.origin.route("busy.test", "/", Reply(200, "ok", {"Content-Length": "2"}))

    def client() -> list[float]:  # a thread: its clock, not the reactor's
        sent: list[float] = []
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            reactor.callFromThread(time.sleep, 0.4)  # type: ignore[attr-defined]
            time.sleep(0.05)  # the reactor is in its sleep now
            for _ in range(2):
                if sent:
                    time.sleep(max(0.0, sent[0] + 1.0 - time.monotonic()))
                sent.append(time.monotonic())
                assert _get(sock, "busy.test", "/") == b"ok"
        return sent

    sent = await threads.deferToThread(client)
    first, second = server.origin.hits_for("busy.test")
    # (the margins allow for the client thread itself being run late on a
    # loaded machine; the reactor's stamp would be 0.35 s late, the gap 0.6 s)
    assert first.t - sent[0] < 0.2  # stamped as it arrived, not when the reactor woke
    assert second.t - first.t >= (sent[1] - sent[0]) - 0.005
    assert abs((second.t - first.t) - (sent[1] - sent[0])) < 0.2


@pytest_twisted.ensureDeferred
async def test_the_arrival_mark_is_the_origins_not_a_header_the_crawler_sent(server: SandboxServer):
    """The front process's mark is taken out before the origin records the
    headers; one a client sends itself neither sets the arrival nor shows."""
    server.origin.route("mark.test", "/", Reply(200, "ok", {"Content-Length": "2"}))

    def client() -> float:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sent = time.monotonic()
            _get(sock, "mark.test", "/", b"X-Walsh-Sandbox-Arrival: 1.0 1.0\r\n")
            return sent

    sent = await threads.deferToThread(client)
    (hit,) = server.origin.hits_for("mark.test")
    assert "x-walsh-sandbox-arrival" not in hit.headers
    assert abs(hit.t - sent) < 0.5 and abs(hit.wall - time.time()) < 5  # not the 1.0 sent


@pytest_twisted.ensureDeferred
async def test_request_bodies_pass_whole_and_each_request_on_a_connection_is_stamped(
    server: SandboxServer,
):
    """A body is forwarded as sent (not read as the next request), and every
    request of a keep-alive connection gets its own arrival."""
    server.origin.route("keep.test", "/a", Reply(200, "a", {"Content-Length": "1"}))
    server.origin.route("keep.test", "/b", Reply(200, "b", {"Content-Length": "1"}))

    def client() -> list[float]:
        sent: list[float] = []
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sent.append(time.monotonic())
            body = b"GET /b HTTP/1.1\r\n\r\n"  # looks like a request; is a body
            sock.sendall(
                b"POST /a HTTP/1.1\r\nHost: keep.test\r\nContent-Length: %d\r\n\r\n%s"
                % (len(body), body)
            )
            data = b""
            while not data.endswith(b"a"):
                data += _recv(sock)
            time.sleep(0.3)
            sent.append(time.monotonic())
            assert _get(sock, "keep.test", "/b") == b"b"
        return sent

    sent = await threads.deferToThread(client)
    hits = server.origin.hits_for("keep.test")
    assert [(h.method, h.path) for h in hits] == [("POST", "/a"), ("GET", "/b")]
    # its own arrival (one mark for both would make the gap 0, not 0.3 s)
    assert abs((hits[1].t - hits[0].t) - (sent[1] - sent[0])) < 0.1


@pytest_twisted.ensureDeferred
async def test_on_https_an_arrival_mark_can_only_be_a_clients_and_is_not_taken(
    server: SandboxServer,
):
    server.start_tls()
    server.origin.route("tls.test", "/", Reply(200, "ok", {"Content-Length": "2"}))

    def client() -> float:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", server.tls_port)) as raw:
            with context.wrap_socket(raw, server_hostname="tls.test") as sock:
                sent = time.monotonic()
                _get(sock, "tls.test", "/", b"X-Walsh-Sandbox-Arrival: 1.0 1.0\r\n")  # type: ignore[arg-type]
                return sent

    sent = await threads.deferToThread(client)
    (hit,) = server.origin.hits_for("tls.test")
    assert hit.t >= sent and hit.wall > 1.0


def test_a_pause_between_the_clock_reads_does_not_shift_an_arrival(monkeypatch) -> None:
    """The front process converts the kernel's wall stamp to the monotonic
    clock; a thread switch between its two clock reads (25 ms here, on the
    first reading) must not move the stamp, or a 1 s gap reads 0.975 s."""
    from scrapy_walsh_research.sandbox import arrivals

    lead = 1_000_000.0
    mono = [100.0]
    pauses = iter([0.025])
    pending = [0.0]

    def monotonic() -> float:
        mono[0] += 0.000_001 + pending[0]
        pending[0] = 0.0
        return mono[0]

    def wall() -> float:
        pending[0] = next(pauses, 0.0)  # the pause comes right after the wall read
        return mono[0] + lead

    monkeypatch.setattr(arrivals.time, "monotonic", monotonic)
    monkeypatch.setattr(arrivals.time, "time", wall)
    arrived = lead + 200.0  # the kernel's wall stamp: 200 s on the monotonic clock
    marked = arrivals._Requests().feed(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", arrived)
    mark = next(line for line in marked.split(b"\r\n") if line.startswith(arrivals.ARRIVAL_HEADER))
    monotonic = float(mark.split(b":", 1)[1].split()[0])
    assert abs(monotonic - 200.0) < 0.000_01


@pytest_twisted.ensureDeferred
async def test_a_connection_opened_while_another_request_is_answered_is_an_overlap(
    server: SandboxServer,
):
    """The serial row's second half: a client that opens a connection while
    a request is being answered, and sends on it only after the answer, never
    has two requests in flight at the origin; the origin still reports the
    pair. One opened after the answer is not an overlap."""
    # answered in 1.5 s: the second connection opens 0.2 s in, however late
    # a loaded machine runs the client
    server.origin.route("slow.test", "/", Reply(200, "ok", {"Content-Length": "2"}, delay=1.5))
    server.origin.route("slow.test", "/next", Reply(200, "no", {"Content-Length": "2"}))

    def client(open_early: bool) -> None:
        port = server.port
        with socket.create_connection(("127.0.0.1", port)) as first:
            first.sendall(b"GET / HTTP/1.1\r\nHost: slow.test\r\n\r\n")
            time.sleep(0.2)  # the first is being answered
            second = socket.create_connection(("127.0.0.1", port)) if open_early else None
            data = b""
            while not data.endswith(b"ok"):
                data += _recv(first)
        time.sleep(0.1)
        with second or socket.create_connection(("127.0.0.1", port)) as sock:
            assert _get(sock, "slow.test", "/next") == b"no"

    await threads.deferToThread(client, False)
    assert server.origin.max_inflight == 1 and server.origin.overlapping() == []
    await threads.deferToThread(client, True)
    assert server.origin.max_inflight == 1
    ((earlier, later),) = server.origin.overlapping()
    assert (earlier.path, later.path) == ("/", "/next")
    assert later.opened < earlier.finished < later.t
