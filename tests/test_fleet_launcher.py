"""``scrapy walsh-workers N``: the fleet forked from one process.

Each test runs the real command (the example project, a real redis-server,
the sandbox origin judging what arrives): every line still gets exactly one
record, a host still never sees two requests within its interval, both
forked workers take lines, a fleet starts cleanly on a new state dir every
time, and a SIGTERM to the parent stops every worker gracefully without
losing a line.
"""

from __future__ import annotations

import json
import multiprocessing
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest_twisted

from scrapy_walsh_research.commands.workers import telnet_ports
from scrapy_walsh_research.state.sqlite import SQLiteStateStore
from tests.support.crawling import gaps, sleep
from tests.support.fleet import redis_settings
from tests.support.processes import ProcessCrawl, _spawn
from tests.test_fleet_workers import durable_records, push, site

EXAMPLE = Path(__file__).parent.parent / "example_project"
SCRAPY = str(Path(sys.executable).parent / "scrapy")


class Launcher(ProcessCrawl):
    """The ``walsh-workers`` parent."""

    def log(self) -> str:
        return self.err.decode(errors="replace")

    def workers(self) -> dict[int, int]:
        """worker index -> pid, as the parent logged them."""
        found = re.findall(r"worker (\d+)/\d+ started, pid (\d+)", self.log())
        return {int(i): int(pid) for i, pid in found}

    def scraped(self) -> dict[int, int]:
        """worker index -> records it produced, from each worker's closing stats."""
        out = {}
        for block in self.log().split("Dumping Scrapy stats:")[1:]:
            stats = block.split("}\n", 1)[0]
            index = re.search(r"'walsh/workers/index': (\d+)", stats)
            count = re.search(r"'item_scraped_count': (\d+)", stats)
            if index:
                out[int(index.group(1))] = int(count.group(1)) if count else 0
        return out


def launch(
    server: Any, n: int, state: Path, command: tuple[str, ...] = (), **settings: Any
) -> Launcher:
    """``scrapy walsh-workers n`` (or *command*) pointed at the sandbox."""
    settings.setdefault("LOG_LEVEL", "INFO")
    proc = _spawn(
        server, "redis_key=targets", state, settings,
        command=command or ("walsh-workers", str(n)), proc=Launcher(),
    )  # fmt: skip
    assert isinstance(proc, Launcher)
    return proc


def failure(log: str) -> str:
    """What to show when the launcher failed: a worker's traceback (the
    workers' logs interleave, so the tail alone may not hold it)."""
    start = log.find("Traceback")
    return log[start : start + 3000] if start >= 0 else log[-3000:]


def pages(server: Any) -> list[Any]:
    return [h for h in server.origin.hits if h.path.startswith("/p/")]


@pytest_twisted.ensureDeferred
async def test_two_forked_workers_give_every_line_one_record_and_keep_each_hosts_interval(
    server, redis_server, tmp_path
):
    hosts = [site(server, f"f{i}.test", 3) for i in range(6)]
    urls = [host[p] for p in range(3) for host in hosts]
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    proc = launch(server, 2, tmp_path / "state", **shared)
    await proc.ended
    log = proc.log()
    assert proc.code == 0, failure(log)
    got = durable_records(redis_server, shared)
    assert sorted(r["line"] for r in got) == list(range(1, 19)), log[-3000:]
    assert {r["outcome"] for r in got} == {"fetched"}
    assert sorted((h.host, h.path) for h in pages(server)) == sorted(
        (f"f{i}.test", f"/p/{p}") for i in range(6) for p in range(3)
    )
    for i in range(6):
        assert min(gaps(server.origin.hits_for(f"f{i}.test"))) >= 1.0
    # two processes, forked by the one launched, each of which took lines
    workers = proc.workers()
    assert sorted(workers) == [0, 1] and proc.transport.pid not in workers.values()
    scraped = proc.scraped()
    assert sorted(scraped) == [0, 1] and sum(scraped.values()) == 18, scraped
    assert min(scraped.values()) > 0, scraped
    for i, pid in workers.items():
        assert f"worker {i} (pid {pid}) exited, code 0" in log
    # one state dir for the fleet, as side-by-side workers share it: nothing raced
    assert "Traceback" not in log and "Cannot write the fleet journal" not in log
    journals = list((tmp_path / "state").glob("redis-fleet-*.json"))
    assert len(journals) == 1 and not list((tmp_path / "state").glob("*.tmp"))


def _open_state(path: Path, start: Any, errors: Any) -> None:
    start.wait()
    try:
        SQLiteStateStore(path)
    except Exception as exc:
        errors.put(repr(exc))


def test_workers_opening_one_new_state_dir_at_once_all_open_it(tmp_path):
    """Forked workers open the state dir they share together. A new SQLite
    file's first connections each switch it to WAL, and SQLite refuses all
    but one at once (measured: 4 processes at once failed in 19 rounds of
    100 without the lock), so this is tried until it would have failed."""
    fork = multiprocessing.get_context("fork")
    errors = fork.SimpleQueue()
    for round_ in range(150):
        path = tmp_path / f"s{round_}" / "state.sqlite3"
        path.parent.mkdir()
        start = fork.Barrier(6)
        procs = [fork.Process(target=_open_state, args=(path, start, errors)) for _ in range(6)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(30)
        assert [proc.exitcode for proc in procs] == [0] * 6
        failed = []
        while not errors.empty():
            failed.append(errors.get())
        assert not failed, f"round {round_}: {failed}"


def _listen_in_rounds(index: int, n: int, firsts: list[int], start: Any, results: Any) -> None:
    """A worker's telnet console, once per round: Scrapy's own port search
    (``listen_tcp``), in this process's own reactor, on the worker's share."""
    from scrapy.utils.reactor import listen_tcp
    from twisted.internet.protocol import ServerFactory

    for first in firsts:
        start.wait()
        try:
            # four consoles each: more tries at once than one start makes
            for _ in range(4):
                ports = telnet_ports([first, first + 50], index, n)
                listen_tcp(ports, "127.0.0.1", ServerFactory())
            results.put(None)
        except Exception as exc:
            results.put(f"{first}: worker {index}: {exc!r}")


def test_workers_starting_together_never_try_one_telnet_port_at_once(tmp_path):
    """Two processes that try one port at once both bind it (Twisted sets
    SO_REUSEADDR) and the second fails in listen(), which Scrapy does not
    catch (measured: 4 processes on one range at once failed in 6 rounds of
    30 without the shares). Each worker has a share of the range instead."""
    spawn = multiprocessing.get_context("spawn")  # each its own reactor, as forked workers
    start, results = spawn.Barrier(6), spawn.SimpleQueue()
    firsts = list(range(20000, 32000, 51))  # below Linux's ephemeral ports
    procs = [
        spawn.Process(target=_listen_in_rounds, args=(i, 6, firsts, start, results))
        for i in range(6)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0] * 6
    got = [results.get() for _ in range(6 * len(firsts))]
    assert [e for e in got if e is not None] == []


def test_each_worker_tries_telnet_ports_no_sibling_tries():
    ranges = [telnet_ports([6023, 6073], i, 4) for i in range(4)]
    assert ranges == [[6023, 6034], [6035, 6046], [6047, 6058], [6059, 6070]]
    assert telnet_ports([6023, 6073], 0, 1) == [6023, 6073]
    # too few ports for one each, or none: the port the system picks
    assert telnet_ports([6023], 0, 2) == [] and telnet_ports([], 1, 2) == []


@pytest_twisted.ensureDeferred
async def test_a_fleet_starts_cleanly_on_a_new_state_dir_every_time(server, redis_server, tmp_path):
    """Four workers start together on a new state dir, three times over: each
    one opens the state, its telnet console and its Redis connection without
    an error (Scrapy's DEBUG log shows redis-py's too), and exits 0."""
    hosts = [site(server, f"c{i}.test", 2) for i in range(4)]
    # a range of our own: ports other tests' crawls race for are not ours to judge
    first = random.randrange(20000, 30000, 100)
    for round_ in range(3):
        shared = redis_settings(redis_server)
        push(redis_server, shared, [host[p] for p in range(2) for host in hosts], tmp_path)
        proc = launch(
            server, 4, tmp_path / f"state{round_}", LOG_LEVEL="DEBUG",
            TELNETCONSOLE_ENABLED=True, TELNETCONSOLE_PORT=f"{first},{first + 50}",
            **shared,
        )  # fmt: skip
        await proc.ended
        log = proc.log()
        assert proc.code == 0, failure(log)
        for problem in ("Traceback", "database is locked", "MAINT_NOTIFICATIONS", "] ERROR:"):
            assert problem not in log, f"round {round_}: {failure(log)}"
        assert sorted(proc.workers()) == [0, 1, 2, 3]
        for i, pid in proc.workers().items():
            assert f"worker {i} (pid {pid}) exited, code 0" in log
        assert log.count("Telnet console listening on") == 4
        assert len(durable_records(redis_server, shared)) == 8


@pytest_twisted.ensureDeferred
async def test_the_commands_walsh_enqueue_prints_work_as_pasted(server, redis_server, tmp_path):
    """walsh-enqueue prints how to run the workers and read their records:
    pasted as printed (the sandbox's settings added, nothing about Redis),
    they reach the feed it filled, under its prefix."""
    urls = site(server, "e.test", 3)
    (tmp_path / "urls.txt").write_text("\n".join(urls) + "\n")
    shared = redis_settings(redis_server)  # a prefix of its own, not the default
    enqueued = subprocess.run(
        [SCRAPY, "walsh-enqueue", str(tmp_path / "urls.txt"),
         "-s", f"WALSH_REDIS_URL={shared['WALSH_REDIS_URL']}",
         "-s", f"WALSH_REDIS_PREFIX={shared['WALSH_REDIS_PREFIX']}"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    printed = [line.strip() for line in enqueued.stdout.splitlines()]
    fleet = next(line for line in printed if line.startswith("scrapy walsh-workers N "))
    records = next(line for line in printed if line.startswith("scrapy walsh-records "))
    assert any(line.startswith("scrapy crawl targets -a redis_key=targets -s ") for line in printed)
    pasted = shlex.split(fleet.replace(" N ", " 2 ", 1))
    proc = launch(server, 2, tmp_path / "state", command=tuple(pasted[1:]))
    await proc.ended
    assert proc.code == 0, failure(proc.log())
    assert sorted(r["line"] for r in durable_records(redis_server, shared)) == [1, 2, 3]
    read = subprocess.run(
        [SCRAPY, *shlex.split(records)[1:]],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert [json.loads(line)["line"] for line in read.stdout.splitlines()] == [1, 2, 3]


def test_without_redis_the_launcher_refuses_before_forking(tmp_path):
    out = subprocess.run(
        [SCRAPY, "walsh-workers", "2", "-a", "redis_key=targets",
         "-s", f"WALSH_STATE_DIR={tmp_path}"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "walsh-workers needs WALSH_REDIS_URL" in out.stderr
    assert "started, pid" not in out.stderr
    zero = subprocess.run(
        [SCRAPY, "walsh-workers", "0", "-s", "WALSH_REDIS_URL=redis://127.0.0.1:1/0"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert zero.returncode == 2 and "at least 1" in zero.stderr
    whole = subprocess.run(
        [SCRAPY, "walsh-workers", "2", "-a", f"list={EXAMPLE / 'urls.txt'}",
         "-s", "WALSH_REDIS_URL=redis://127.0.0.1:1/0"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert whole.returncode == 2 and "walsh-enqueue" in whole.stderr
    # a configuration the start-up check refuses is refused once, before any fork
    handlers = '{"http": "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"}'
    refused = subprocess.run(
        [SCRAPY, "walsh-workers", "2", "-s", "WALSH_REDIS_URL=redis://127.0.0.1:1/0",
         "-s", f"DOWNLOAD_HANDLERS={handlers}"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "refusing to crawl" in refused.stderr
    assert "started, pid" not in refused.stderr
    # and a spider without the add-on (no project here) is not run at all
    bare = subprocess.run(
        [SCRAPY, "walsh-workers", "2", "-s", "WALSH_REDIS_URL=redis://127.0.0.1:1/0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bare.returncode == 2 and "without the Walsh-Research add-on" in bare.stderr


@pytest_twisted.ensureDeferred
async def test_sigterm_to_the_launcher_stops_every_worker_gracefully_and_loses_no_line(
    server, redis_server, tmp_path
):
    hosts = [site(server, f"g{i}.test", 5) for i in range(4)]
    urls = [host[p] for p in range(5) for host in hosts]
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    proc = launch(server, 2, tmp_path / "state", **shared)
    for _ in range(3000):  # 30 s
        if len(pages(server)) >= 5 or proc.code is not None:
            break
        await sleep(0.01)
    assert proc.code is None, proc.log()[-3000:]
    proc.transport.signalProcess("TERM")
    await proc.ended
    log = proc.log()
    # passed on once to each worker, which stopped as Scrapy does on one SIGTERM
    assert proc.code == 0, failure(log)
    assert "SIGTERM received, passed to 2 worker(s)" in log
    assert log.count("Received SIGTERM, shutting down gracefully") == 2, log[-3000:]
    assert "forcing" not in log and "Traceback" not in log
    stopped = {r["line"] for r in durable_records(redis_server, shared)}
    assert 5 <= len(stopped) < 20, stopped
    # every page that was requested has its record: none went out unrecorded
    fetched_before = {(h.host, h.path) for h in pages(server)}
    assert len(fetched_before) == len(stopped)
    # what the stopped workers had not finished is still in the feed for the next run
    again = launch(server, 1, tmp_path / "state", **shared)
    await again.ended
    assert again.code == 0, again.log()[-3000:]
    got = durable_records(redis_server, shared)
    assert sorted(r["line"] for r in got) == list(range(1, 21))
    assert len(pages(server)) == 20  # each page requested once
    for i in range(4):
        assert min(gaps(server.origin.hits_for(f"g{i}.test"))) >= 1.0


@pytest_twisted.ensureDeferred
async def test_a_worker_whose_launcher_is_killed_stops_gracefully(server, redis_server, tmp_path):
    """SIGKILL leaves the parent no chance to pass a signal on: the kernel
    sends the orphaned worker SIGTERM, and it stops as it would on one."""
    urls = site(server, "o.test", 6)
    shared = redis_settings(redis_server)
    push(redis_server, shared, urls, tmp_path)
    proc = launch(server, 1, tmp_path / "state", **shared)
    for _ in range(3000):
        if len(pages(server)) >= 2 or proc.code is not None:
            break
        await sleep(0.01)
    assert proc.code is None, proc.log()[-3000:]
    proc.transport.signalProcess("KILL")
    await proc.ended  # the worker holds the same stderr: this waits for it too
    log = proc.log()
    assert "Received SIGTERM, shutting down gracefully" in log, log[-3000:]
    assert len(pages(server)) < 6 and "Traceback" not in log
