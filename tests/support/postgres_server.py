"""A real PostgreSQL server on loopback for the tests and the benchmarks: a
private cluster (``initdb`` in a temporary directory), started, killed,
restarted. Debian's server binaries (``scripts/install-postgres.sh``).

PostgreSQL refuses to run as root: when the tests run as root (CI), the
cluster belongs to the ``postgres`` user and its commands run as that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.redis_server import free_port


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(
            "PostgreSQL's server is not installed: bash scripts/install-postgres.sh "
            "(.ci/run runs it)"
        )
    return Path(initdb).parent


class PostgresServer:
    """One cluster with one database, ``walsh``, that user ``walsh`` may
    use without a password (``trust`` on loopback)."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="walsh-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.owner = "postgres" if os.geteuid() == 0 else None
        if self.owner is not None:
            shutil.chown(self.root, self.owner)
        self._run("initdb", "-D", str(self.data), "-U", "walsh", "--auth=trust", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.owner is not None:
            command = ["runuser", "-u", self.owner, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.root)

    @property
    def url(self) -> str:
        return f"postgresql://walsh@127.0.0.1:{self.port}/walsh"

    def start(self) -> PostgresServer:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} "
            # the tests measure the bundle, not the disk
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        # a start right after kill() can meet the killed server's backends
        # not yet gone (its shared memory still "in use") on a loaded machine:
        # tried again for a while, and its log shown if it never starts
        for attempt in range(6):
            try:
                self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                          str(self.root / "server.log"), "-w", "start")  # fmt: skip
                break
            except subprocess.CalledProcessError as exc:
                if attempt == 5:
                    log = (self.root / "server.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"PostgreSQL did not start: {exc.stderr!r}\n{log}") from exc
                time.sleep(1.0)
        deadline = time.monotonic() + 30
        while True:
            try:
                self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "walsh",
                          "-d", "postgres", "-c", "SELECT 1")  # fmt: skip
                break
            except subprocess.CalledProcessError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "walsh", "walsh")
        except subprocess.CalledProcessError:
            pass  # there from an earlier start
        return self

    def kill(self) -> None:
        """SIGKILL the postmaster and its children: no shutdown."""
        pidfile = self.data / "postmaster.pid"
        if not pidfile.exists():
            return
        pid = int(pidfile.read_text().split()[0])
        try:
            group = os.getpgid(pid)
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:  # the postmaster and every backend of its group gone
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        pidfile.unlink(missing_ok=True)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def client(self) -> Any:
        """A synchronous connection (psycopg), autocommit, for checks from outside a crawl."""
        import psycopg

        return psycopg.connect(self.url, autocommit=True)
