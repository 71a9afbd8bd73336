"""A crawl that must not start says so as a refusal, not as a crash: one
clear message on stderr (with ``--nolog`` too), no traceback, a non-zero
exit, and nothing sent. Tried as a new user would: a fresh ``scrapy
startproject`` project with the ADDONS line, each command a real child
process pointed at the loopback sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import pytest_twisted

from tests.support.processes import SCRAPY, _spawn, new_project

#: a spider file for ``scrapy runspider``, beside the project
RUNSPIDER = """\
import scrapy


class Shop(scrapy.Spider):
    name = "shop"
    start_urls = ["http://shop.test/"]

    def parse(self, response):
        yield {"url": response.url}
"""
CONFIG = "CONCURRENT_REQUESTS=8: R4 requires serial requests. Set CONCURRENT_REQUESTS=3"


def shop_project(tmp_path: Path) -> Path:
    """A new project with the add-on, a list and a spider file for runspider."""
    project = new_project(tmp_path)
    (project / "urls.txt").write_text("http://shop.test/\n")
    (project / "shop_spider.py").write_text(RUNSPIDER)
    return project


def assert_one_clear_refusal(err: str, says: str, code: int | None, times: int = 1) -> None:
    assert code not in (0, None), err[-3000:]
    assert err.count(says) == times, err[-3000:]
    assert "Traceback" not in err and "never retrieved" not in err, err[-3000:]


#: how the user started it -> (command, -s settings, what it must say)
CRAWLS = {
    "crawl, the start-up check": (("crawl", "targets"), {"CONCURRENT_REQUESTS": 8}, CONFIG),
    "crawl, a missing list": (("crawl", "targets"), {}, "URL list 'nope.txt' does not exist."),
    "crawl, an unusable state dir": (
        ("crawl", "targets"),
        {"WALSH_STATE_DIR": "{file}"},
        "cannot be the state directory",
    ),
    "runspider, the start-up check": (
        ("runspider", "shop_spider.py"),
        {"CONCURRENT_REQUESTS": 8},
        CONFIG,
    ),
}


@pytest.mark.parametrize("nolog", [False, True], ids=["logging", "--nolog"])
@pytest.mark.parametrize("case", sorted(CRAWLS))
@pytest_twisted.ensureDeferred
async def test_a_refused_crawl_says_why_once_without_a_traceback_and_sends_nothing(
    server, tmp_path, case, nolog
):
    project = shop_project(tmp_path)
    command, settings, says = CRAWLS[case]
    afile = tmp_path / "a-file"
    afile.write_text("")
    settings = {k: str(v).replace("{file}", str(afile)) for k, v in settings.items()}
    listed = "list=nope.txt" if "missing list" in case else f"list={project / 'urls.txt'}"
    proc = _spawn(server, listed, tmp_path / "state", settings, project=project,
                  command=(*command, *(["--nolog"] if nolog else [])))  # fmt: skip
    await proc.ended
    err = proc.err.decode()
    assert_one_clear_refusal(err, says, proc.code)
    assert server.origin.hits == []  # not even the operator's blocklist
    if nolog:  # the message, and nothing else
        assert len(err.strip().splitlines()) <= 2, err


@pytest.mark.parametrize("nolog", [False, True], ids=["logging", "--nolog"])
@pytest_twisted.ensureDeferred
async def test_a_refusal_every_walsh_worker_would_meet_is_said_once_before_any_starts(
    server, redis_server, tmp_path, nolog
):
    """A value every worker would refuse (the blocklist over plain http):
    the launcher reads the same checked settings, so it says it once, no
    traceback, exits non-zero, and starts no worker to say it again."""
    project = shop_project(tmp_path)
    settings = {
        "WALSH_REDIS_URL": redis_server.url,
        "WALSH_REDIS_PREFIX": f"refused-{nolog}",
        "WALSH_BLOCKLIST_ALLOW_HTTP": False,
    }
    proc = _spawn(server, "redis_key=targets", tmp_path / "state", settings, project=project,
                  command=("walsh-workers", "2", *(["--nolog"] if nolog else [])))  # fmt: skip
    await proc.ended
    assert_one_clear_refusal(
        proc.err.decode(), "WALSH_BLOCKLIST_URL='http://operator.test", proc.code
    )
    assert server.origin.hits == []


@pytest.mark.parametrize("nolog", [False, True], ids=["logging", "--nolog"])
def test_walsh_conformance_with_a_refused_configuration_says_so_once(tmp_path, nolog):
    project = shop_project(tmp_path)
    run = subprocess.run(
        [SCRAPY, "walsh-conformance", "-s", "CONCURRENT_REQUESTS=8", *(["--nolog"] if nolog else [])],
        cwd=project, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert_one_clear_refusal(run.stderr, CONFIG, run.returncode)
    assert "nothing was checked" in run.stderr
    assert "[FAIL]" not in run.stdout  # not 53 rows that each repeat it


@pytest.mark.parametrize("nolog", [False, True], ids=["logging", "--nolog"])
@pytest_twisted.ensureDeferred
async def test_a_crawl_stopped_because_its_audit_store_refuses_says_why_once(
    server, postgres_server, tmp_path, nolog
):
    """The crawl that opens and then must stop (its PostgreSQL refuses the
    audit log, ``errors.stop_refused``): said once, also with ``--nolog``."""
    project = shop_project(tmp_path)
    wrong = postgres_server.url.rsplit("/", 1)[0] + "/no_such_database"
    proc = _spawn(server, f"list={project / 'urls.txt'}", tmp_path / "state",
                  {"WALSH_AUDIT_URL": wrong}, project=project,
                  command=("crawl", "targets", *(["--nolog"] if nolog else [])))  # fmt: skip
    await proc.ended
    assert_one_clear_refusal(proc.err.decode(), "refuses the audit log", proc.code)
    assert server.origin.hits == []


@pytest.mark.parametrize(
    "command",
    [("walsh-enqueue", "urls.txt"), ("walsh-records",), ("walsh-migrate",), ("walsh-report",)],
    ids=lambda c: c[0],
)
def test_an_operator_command_given_a_value_no_crawl_accepts_says_why_once(tmp_path, command):
    """The operator's commands read the same typed settings a crawl does, and
    refuse what it refuses the way it does: one message, no traceback."""
    project = shop_project(tmp_path)
    run = subprocess.run(
        [SCRAPY, *command, "-s", "WALSH_POLICY_CACHE_SIZE=0", "-s", "WALSH_REDIS_URL=redis://127.0.0.1:1/0"],
        cwd=project, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert_one_clear_refusal(
        run.stderr, "WALSH_POLICY_CACHE_SIZE=0: a cache needs room", run.returncode
    )
