"""Crawls in real child processes (``scrapy crawl targets`` in the example
project, or a project of the test's own), pointed at the sandbox: to kill
one, to run a fleet of workers, or to follow a user's commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from twisted.internet import defer, protocol

from scrapy_walsh_research.sandbox import SandboxServer
from tests.support.crawling import BLOCKLIST_HOST, BLOCKLIST_PATH, SCHEMA_PATH

#: the ``scrapy`` command of this environment
SCRAPY = str(Path(sys.executable).parent / "scrapy")


def new_project(tmp_path: Path, name: str = "shop") -> Path:
    """A fresh ``scrapy startproject`` project in *tmp_path* with the ADDONS
    line added to its settings.py, as a new user sets it up."""
    subprocess.run([SCRAPY, "startproject", name], cwd=tmp_path, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    project = tmp_path / name
    settings_py = project / name / "settings.py"
    settings_py.write_text(
        settings_py.read_text() + '\nADDONS = {"scrapy_walsh_research.Addon": 0}\n'
    )
    return project


#: children started and not yet ended: a test that fails before awaiting its
#: crawl would leave it running (waiting for its store, loading the machine
#: for the tests after it); ``kill_leftover_children`` ends them
_RUNNING: set[ProcessCrawl] = set()


def kill_leftover_children() -> int:
    """SIGKILL every child crawl still running (a test's teardown); how many."""
    left = [p for p in _RUNNING if p.transport is not None and p.transport.pid is not None]
    for proc in left:
        try:
            proc.transport.signalProcess("KILL")
        except Exception:  # ended between the look and the signal
            pass
    _RUNNING.clear()
    return len(left)


class ProcessCrawl(protocol.ProcessProtocol):
    """A ``scrapy crawl targets`` in a real child process (to SIGKILL it)."""

    def __init__(self) -> None:
        _RUNNING.add(self)
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.err = b""
        self.transport: Any = None
        #: its exit code once it ended (None: killed by a signal, or running)
        self.code: int | None = None

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Any) -> None:
        _RUNNING.discard(self)
        self.code = reason.value.exitCode
        self.ended.callback(None)


def spawn_targets_crawl(
    server: SandboxServer, list_file: Path, state: Path, **settings: Any
) -> ProcessCrawl:
    """Start the example project's ``targets`` spider on *list_file* in a child
    process, pointed at the sandbox; *settings* are passed with ``-s``."""
    return _spawn(server, f"list={list_file}", state, settings)


def spawn_worker(
    server: SandboxServer,
    key: str,
    state: Path,
    log: Path | None = None,
    extra_path: Path | None = None,
    **settings: Any,
) -> ProcessCrawl:
    """A worker process: the ``targets`` spider reading the Redis feed *key*;
    with *log*, its records go to that JSON-lines file (``-o``); *extra_path*
    goes first on its PYTHONPATH (a ``sitecustomize`` to skew its clock)."""
    if log is not None:
        settings.setdefault("FEEDS", json.dumps({str(log): {"format": "jsonlines"}}))
    return _spawn(server, f"redis_key={key}", state, settings, extra_path)


def _spawn(
    server: SandboxServer,
    spider_arg: str,
    state: Path,
    settings: dict[str, Any],
    extra_path: Path | None = None,
    project: Path | None = None,
    command: tuple[str, ...] = ("crawl", "targets"),
    proc: ProcessCrawl | None = None,
) -> ProcessCrawl:
    """``scrapy crawl targets`` (or *command*) in a child process, in
    *project* (default: the example project), pointed at the sandbox."""
    from twisted.internet import reactor

    project = project or Path(__file__).parent.parent.parent / "example_project"
    scrapy_bin = str(Path(sys.executable).parent / "scrapy")
    options = {
        "WALSH_BLOCKLIST_URL": server.url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(BLOCKLIST_HOST, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        "WALSH_STATE_DIR": state,
        "WALSH_RUN_INTERVAL": 0,
        "WALSH_LLMS_PROBE": False,
        "TWISTED_DNS_RESOLVER": "scrapy_walsh_research.sandbox.origin.SandboxDNSResolver",
        **settings,
    }
    args = [scrapy_bin, *command, *(["-a", spider_arg] if spider_arg else [])]
    for name, value in options.items():
        args += ["-s", f"{name}={value}"]
    first = [str(extra_path)] if extra_path is not None else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*first, str(project), *sys.path])}
    proc = proc or ProcessCrawl()
    proc.transport = reactor.spawnProcess(proc, scrapy_bin, args, env=env, path=str(project))
    return proc
