"""A real ``redis-server`` on loopback for the tests and the benchmark:
started, killed, restarted.

With ``persist`` it runs with AOF and ``appendfsync always``, as the docs tell
operators to run it, so a SIGKILL loses nothing that was acknowledged. With
``persist="rdb"`` it keeps only snapshots taken by :meth:`snapshot`, which
:meth:`restore` puts back before a start: Redis restarted from an older
snapshot, as Debian's default persistence would after a crash.

With ``persist="plain"`` it runs as ``redis-server`` does when started with
no configuration (Debian's default too): RDB snapshots on its ``save``
schedule, no AOF.

With ``replicaof`` it is a replica of that server (its configuration kept:
AOF with ``appendfsync always``, as a managed replica runs): made to lag
(:meth:`lag`, ``CLIENT PAUSE WRITE`` on it, so the stream it reads queues)
and promoted (:meth:`promote`, ``REPLICAOF NO ONE``), as Sentinel or a
managed service fails over to it.

With ``steppable_clock`` its wall clock can be stepped while it runs
(:meth:`step_clock`), as an NTP correction on the Redis host steps it: a
small shim (``stepclock.c``, compiled with the system's C compiler on first
use) is preloaded into the real ``redis-server``, so ``TIME`` (and its key
expiry, and ``uptime_in_seconds``) jump while its monotonic clock does not.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(
        self,
        workdir: Path,
        *,
        persist: bool | str = True,
        steppable_clock: bool = False,
        config: Sequence[str] = (),
        replicaof: RedisServer | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed: bash scripts/install-redis.sh (.ci/run runs it)"
            )
        self.binary = binary
        self.workdir = workdir
        self.persist = persist
        #: further redis-server arguments (``--rename-command INFO ""``, ...)
        self.config = list(config)
        #: the primary this server replicates (None: it is a primary)
        self.replicaof = replicaof
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        self.env: dict[str, str] | None = None
        if steppable_clock:
            self._offset_file = workdir / "clock-offset"
            self._offset_file.write_bytes(struct.pack("=q", 0))
            self.env = {
                **os.environ,
                "LD_PRELOAD": str(stepclock_library()),
                "WALSH_CLOCK_OFFSET_FILE": str(self._offset_file),
            }

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.workdir), "--daemonize", "no",
            "--logfile", str(self.workdir / "redis.log"),
            # a replica that connects is sent the data at once, not 5 s later
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        # "plain": redis-server's own defaults (RDB snapshots on its save schedule)
        if self.persist == "rdb":
            args += ["--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb"]
        elif self.persist and self.persist != "plain":
            args += ["--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        elif not self.persist:
            args += ["--save", "", "--appendonly", "no"]
        if self.replicaof is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replicaof.port)]
        args += self.config
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def wipe(self) -> None:
        """Delete its data files (Redis stopped): the next start is empty, as
        after losing its volume."""
        for path in self.workdir.iterdir():
            if path.name.startswith(("appendonly", "dump.rdb")):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def lose_volume(self) -> None:
        """Killed, its data files gone, and set to come back with no
        persistence that could vouch for it: the next :meth:`start` is an
        empty Redis whose lost history only its restart reveals."""
        self.kill()
        self.wipe()
        self.persist = False

    def fresh_volume(self) -> None:
        """Killed and its data files gone, its configuration kept (AOF with
        appendfsync always): the next :meth:`start` is an empty Redis that
        says it keeps every write, as a container restarted on a fresh volume
        is."""
        self.kill()
        self.wipe()

    def age(self, seconds: float) -> RedisServer:
        """Wait until the running server has been up *seconds*: a fleet that
        meets it for the first time then takes it for one that has been
        running a while (a younger one may have lost a fleet's records: see
        ``FleetGuard.young``)."""
        client = self.client()
        try:
            up = float(client.info("server")["uptime_in_seconds"])
        finally:
            client.close()
        time.sleep(max(0.0, seconds - up + 1.0))  # uptime is whole seconds
        return self

    def synced(self, timeout: float = 30.0) -> RedisServer:
        """Wait until this replica holds every write its primary has."""
        assert self.replicaof is not None, "not a replica"
        primary, replica = self.replicaof.client(), self.client()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                mine = replica.info("replication")
                theirs = primary.info("replication")["master_repl_offset"]
                if mine.get("master_link_status") == "up" and mine["slave_repl_offset"] == theirs:
                    return self
                time.sleep(0.05)
        finally:
            primary.close()
            replica.close()
        raise RuntimeError("the replica did not catch up with its primary")

    def lag(self, ms: int) -> None:
        """Apply nothing more of the primary's stream for *ms* milliseconds
        (``CLIENT PAUSE <ms> WRITE`` on this replica): what the primary
        acknowledges meanwhile queues here, and is lost if it fails over."""
        client = self.client()
        try:
            client.execute_command("CLIENT", "PAUSE", str(ms), "WRITE")
        finally:
            client.close()

    def behind(self) -> int:
        """Bytes of its primary's stream this replica has not applied."""
        assert self.replicaof is not None, "not a replica"
        primary, replica = self.replicaof.client(), self.client()
        try:
            theirs = int(primary.info("replication")["master_repl_offset"])
            return theirs - int(replica.info("replication")["slave_repl_offset"])
        finally:
            primary.close()
            replica.close()

    def promote(self) -> None:
        """``REPLICAOF NO ONE``, as Sentinel or a managed service does on a
        failover (what it had not applied of the stream is dropped), then
        let clients write again. A later :meth:`start` starts it as a primary."""
        client = self.client()
        try:
            client.execute_command("REPLICAOF", "NO", "ONE")
            client.execute_command("CLIENT", "UNPAUSE")
        finally:
            client.close()
        self.replicaof = None

    def snapshot(self, name: str) -> None:
        """SAVE now and keep the snapshot as *name*."""
        client = self.client()
        client.save()
        client.close()
        shutil.copy(self.workdir / "dump.rdb", self.workdir / f"{name}.rdb")

    def restore(self, name: str) -> None:
        """Put snapshot *name* back as the one the next start loads (Redis stopped)."""
        shutil.copy(self.workdir / f"{name}.rdb", self.workdir / "dump.rdb")

    def step_clock(self, seconds: float) -> None:
        """Step the running (and any later) server's wall clock by *seconds*
        (negative: back), on top of any earlier step."""
        with open(self._offset_file, "r+b") as f, mmap.mmap(f.fileno(), 8) as shared:
            (offset,) = struct.unpack("=q", shared[:8])
            shared[:8] = struct.pack("=q", offset + round(seconds * 1e9))

    def client(self) -> Any:
        """A synchronous client (redis.Redis), for checks from outside a crawl."""
        import redis

        return redis.Redis.from_url(self.url, decode_responses=True)


def stepclock_library() -> Path:
    """The steppable-clock shim, compiled once per source version (needs a C
    compiler: ``cc``, as on any machine that builds Python packages)."""
    source = Path(__file__).with_name("stepclock.c")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    target = Path(tempfile.gettempdir()) / f"walsh-stepclock-{digest}.so"
    if not target.exists():
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise RuntimeError(
                "a C compiler (cc) is needed to step redis-server's clock: "
                "run scripts/install-cc.sh"
            )
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(source)],
            check=True, capture_output=True,
        )  # fmt: skip
        os.replace(tmp, target)
    return target
