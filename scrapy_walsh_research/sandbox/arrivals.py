"""The sandbox origin's front door: a process of its own that stamps when
each request arrived, by the kernel's clock.

Spacing is judged at the origin ("at least 1 s between requests, as the
origin saw them"). An origin that shares the crawler's reactor stamps a
request when that reactor gets round to it: on a busy machine the first of
two requests is stamped late, and a gap the crawler kept looks short (a
1 s gap judged 0.997 s on two loaded cores). This process sits between the
crawler and the origin: it accepts the connection, asks the kernel for the
time each read's bytes arrived (``SO_TIMESTAMPNS``: stamped when the
crawler's write reached the loopback, before any process is scheduled), and
forwards each request with that time in an extra header, which the origin
takes as the request's arrival and removes. No scheduling delay of this
process, the origin's or the crawler's can make a gap look shorter than the
crawler made it; load can only make gaps longer. Where the kernel gives no
stamp (not Linux), the time the read returned is used.

Written by hand on purpose: it is a byte pump with a header inserted, which
no proxy library offers with kernel receive stamps, and it runs as a plain
script (``python -I -S arrivals.py PORT``) that imports only the standard
library, so it starts in milliseconds. It prints its own port on one line
and ends when its standard input closes (its parent ended) or on SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import threading
import time

#: the header the origin reads the arrival from: "<monotonic> <wall>"
ARRIVAL_HEADER = b"X-Walsh-Sandbox-Arrival"
#: SO_TIMESTAMPNS (Python's socket module does not name it); its value on Linux
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_HEAD_LIMIT = 1 << 20


def _stamping(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what *sock* receives; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _read(sock: socket.socket, stamped: bool) -> tuple[bytes, float]:
    """The next bytes from *sock*, and when they arrived (wall clock).

    The kernel's stamp is that of the latest packet the read took, and
    packets queued unread are merged under the latest one's stamp: a request
    is stamped by its first byte's arrival only while nothing else waits
    behind it. That holds for a crawler that sends a request only once the
    one before it was answered (the front process read it to forward it),
    as the bundle does (a pipelining client's requests, read late, would
    share one stamp)."""
    if not stamped:
        data = sock.recv(65536)
        return data, time.time()
    data, ancillary, _flags, _addr = sock.recvmsg(65536, socket.CMSG_SPACE(16))
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(value) >= 16:
            seconds, nanoseconds = struct.unpack("@qq", value[:16])
            return data, seconds + nanoseconds / 1e9
    return data, time.time()


def _wall_minus_monotonic(samples: int = 5) -> float:
    """The wall clock's lead over the monotonic clock, read so that a pause
    between the two reads cannot skew it.

    Read as ``time.time() - time.monotonic()``, a thread switch or a
    preemption between the two calls (this process runs a thread per
    connection, on a loaded machine) shifts the result by the pause: a
    request stamped 23 ms late made a 1 s gap read 0.977 s. Each sample
    brackets the wall read between two monotonic reads; the tightest
    bracket's midpoint is the one a pause touched least."""
    best = (float("inf"), 0.0)
    for _ in range(samples):
        before = time.monotonic()
        wall = time.time()
        after = time.monotonic()
        best = min(best, (after - before, wall - (before + after) / 2))
    return best[1]


class _Requests:
    """Finds where each request begins in one connection's byte stream and
    puts the arrival header after its request line. Bodies are skipped by
    ``Content-Length``; after a chunked one the rest passes unmarked (the
    origin then stamps the requests itself)."""

    def __init__(self) -> None:
        self.head = b""
        self.arrived = 0.0
        self.body_left = 0
        self.raw = False

    def feed(self, data: bytes, arrived: float) -> bytes:
        out: list[bytes] = []
        while data:
            if self.raw:
                out.append(data)
                break
            if self.body_left:
                taken = data[: self.body_left]
                self.body_left -= len(taken)
                out.append(taken)
                data = data[len(taken) :]
                continue
            if not self.head:
                self.arrived = arrived
            self.head += data
            data = b""
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > _HEAD_LIMIT:
                    self.raw = True
                    out.append(self.head)
                    self.head = b""
                continue
            head, data = self.head[: end + 4], self.head[end + 4 :]
            self.head = b""
            out.append(self._marked(head))
        return b"".join(out)

    def _marked(self, head: bytes) -> bytes:
        line_end = head.find(b"\r\n")
        for line in head[line_end + 2 :].split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length" and value.strip().isdigit():
                self.body_left = int(value.strip())
            elif name == b"transfer-encoding":
                self.raw = True
        monotonic = self.arrived - _wall_minus_monotonic()
        mark = b"%s: %.6f %.6f\r\n" % (ARRIVAL_HEADER, monotonic, self.arrived)
        return head[: line_end + 2] + mark + head[line_end + 2 :]


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _upstream(client: socket.socket, origin: socket.socket) -> None:
    stamped = _stamping(client)
    requests = _Requests()
    try:
        while True:
            data, arrived = _read(client, stamped)
            if not data:
                # the crawler has sent all it will: the origin still answers
                origin.shutdown(socket.SHUT_WR)
                return
            origin.sendall(requests.feed(data, arrived))
    except OSError:
        _close(client, origin)


def _downstream(origin: socket.socket, client: socket.socket) -> None:
    try:
        while True:
            data = origin.recv(65536)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    finally:
        # the origin closed (a ``drop`` reply, or Connection: close): so does
        # the connection the crawler holds
        _close(client, origin)


def _serve(client: socket.socket, backend_port: int) -> None:
    try:
        origin = socket.create_connection(("127.0.0.1", backend_port))
    except OSError:
        _close(client)
        return
    for sock in (client, origin):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=_downstream, args=(origin, client), daemon=True).start()
    _upstream(client, origin)


def main(argv: list[str]) -> int:
    backend_port = int(argv[1])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    print(listener.getsockname()[1], flush=True)
    # the parent's end of our stdin closes when it ends, however it ends
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return 0
        threading.Thread(target=_serve, args=(client, backend_port), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
