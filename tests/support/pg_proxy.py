"""A TCP proxy between a client and PostgreSQL, on loopback, that can lose
an acknowledgement or go silent (the tests of the audit log's PostgreSQL
store: a write retried after its acknowledgement was lost, a network that
stops answering mid-read)."""

from __future__ import annotations

import select
import socket
import struct
import threading


class PgProxy:
    """Between a client and PostgreSQL, on loopback. ``lose_ack()``: the
    next INSERT is committed by the server but its acknowledgement never
    reaches the client (the connection drops after CommandComplete +
    ReadyForQuery, as when a network path or a pooler fails at that
    moment). ``go_silent_on(b"DECLARE")``: once the client sends a message
    containing those bytes, nothing more is forwarded either way and the
    sockets stay open (a network partition: no RST, no FIN)."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lose_ack = False
        self._silent_on: bytes | None = None
        self.silenced = threading.Event()
        self.acks_lost = 0
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, database: str = "walsh") -> str:
        return (f"postgresql://walsh@127.0.0.1:{self.port}/{database}"
                "?sslmode=disable&gssencmode=disable")  # fmt: skip

    def lose_ack(self) -> None:
        self._lose_ack = True

    def go_silent_on(self, marker: bytes) -> None:
        self._silent_on = marker

    def close(self) -> None:
        self.listener.close()
        for s in self._open:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            self._open += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        buf = b""  # server -> client, split into messages
        insert_done = False
        silent = False
        while True:
            try:
                ready, _, _ = select.select([client, server], [], [], 0.2)
            except (OSError, ValueError):
                return
            for sock in ready:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    for s in (client, server):
                        s.close()
                    return
                if silent:
                    continue
                if sock is client:
                    if self._silent_on is not None and self._silent_on in data:
                        silent = True
                        self.silenced.set()
                        continue
                    server.sendall(data)
                    continue
                buf += data
                out = b""
                while len(buf) >= 5:
                    kind = buf[:1]
                    (length,) = struct.unpack("!i", buf[1:5])
                    if len(buf) < 1 + length:
                        break
                    msg, buf = buf[: 1 + length], buf[1 + length :]
                    if kind == b"C":
                        insert_done = msg[5:].startswith(b"INSERT")
                    if kind == b"Z" and insert_done and self._lose_ack:
                        # committed on the server; the client never hears it
                        self._lose_ack = False
                        self.acks_lost += 1
                        client.close()
                        server.close()
                        return
                    out += msg
                if out:
                    client.sendall(out)
