"""A new user's first day on a machine without internet: ``scrapy
startproject``, the ADDONS line, a list, the crawl as the README writes it,
twice. The operator's blocklist (its default URL) cannot be reached and one
line's host name does not exist: neither may cost every run a wait the user
cannot see through."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest_twisted

from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.settings import defaults
from tests.support.crawling import sleep
from tests.test_project_readme import (
    EXAMPLE_BLOCKLIST,
    README,
    readme_block,
    readme_command,
    run,
    startproject,
)

#: the lab's resolver: *.test is the sandbox, every other name does not exist
OFFLINE = {"TWISTED_DNS_RESOLVER": "tests.support.offline.OfflineDNSResolver"}
#: the bound, shortened for the test (5 min by default), and its tries
#: (about 0, 3 and 9 s, the last just before it)
BOUND = {"WALSH_POLICY_WAIT": 10, "WALSH_POLICY_RETRY_DELAY": 3}
ROBOTS_OK = Reply(200, "User-agent: *\nAllow: /\n")


def records(project: Path) -> list[list[dict[str, Any]]]:
    """Each run's records (its own file under records/), oldest run first."""
    return [
        sorted((json.loads(r) for r in path.read_text().splitlines()), key=lambda r: r["line"])
        for path in sorted((project / "records").glob("*.jsonl"))
    ]


def warnings(err: str) -> list[str]:
    """The WARNING lines a run wrote on stderr (Scrapy's log format)."""
    return [line for line in err.splitlines() if "] WARNING: " in line or " WARNING: " in line]


@pytest_twisted.ensureDeferred
async def test_a_new_project_without_internet_waits_once_for_the_blocklist_and_never_for_no_such_name(
    server, tmp_path
):
    """Run 1 waits for the operator's blocklist (its default URL does not
    resolve) up to the bound, once, and says so in one WARNING naming the
    URL and the setting to change; the line whose host does not exist gets
    its record at once. Run 2, with nothing else due, ends at once: the
    list is not waited for again, and the line is decided again without a
    wait. The lab's way out the WARNING and the README give (a list served
    locally) works. (Before: each run waited the bound for the list, and
    the line cost its own bound on top.)"""
    startproject(tmp_path, "lab")
    project = tmp_path / "lab"
    settings_py = project / "lab" / "settings.py"
    settings_py.write_text(settings_py.read_text() + "\n" + readme_block("ADDONS = "))
    server.origin.route("site.test", "/robots.txt", ROBOTS_OK)
    server.origin.route("site.test", "/page", Reply(200, "a page"))
    page = server.url("site.test", "/page")
    (project / "urls.txt").write_text(f"{page}\nhttp://nosuch.invalid/page\n")
    crawl = readme_command("scrapy crawl targets")

    # run 1: the blocklist is waited for, once; the missing name is not
    started = time.monotonic()
    first = await run(crawl, project, {**OFFLINE, **BOUND})
    err = first.err.decode()
    assert first.code == 0 and "Traceback" not in err, err[-3000:]
    assert server.origin.hits_for("site.test")[0].t - started >= 8.0
    (warning,) = [w for w in warnings(err) if "blocklist" in w]
    assert defaults.WALSH_BLOCKLIST_URL in warning, warning
    assert "WALSH_POLICY_WAIT" in warning and "WALSH_BLOCKLIST_URL=" in warning, warning
    (run1,) = records(project)
    assert [(r["outcome"], r["rule"]) for r in run1] == [("fetched", None), ("skipped", "R2")]
    assert run1[1]["reason"].startswith("the host name nosuch.invalid does not exist")

    # run 2: nothing due but the missing name: it ends at once
    await sleep(1.1)  # the export file is named by the second it started
    second = await run(crawl, project, {**OFFLINE, **BOUND})
    err = second.err.decode()
    assert second.code == 0 and "Traceback" not in err, err[-3000:]
    # the crawl's own time (Scrapy's stats), not the child's start-up, which
    # a loaded machine lengthens: the bound (10 s) is not waited
    took = float(re.search(r"'elapsed_time_seconds': ([\d.]+)", err).group(1))  # type: ignore[union-attr]
    assert took < 6.0, took
    (warning,) = [w for w in warnings(err) if "blocklist" in w]
    assert "this crawl does not wait" in warning and "WALSH_BLOCKLIST_URL=" in warning, warning
    run2 = records(project)[1]
    assert [(r["outcome"], r["rule"]) for r in run2] == [("skipped", "R8"), ("skipped", "R2")]
    assert "does not exist" in run2[1]["reason"]

    # the lab's way out, as the WARNING and the README write it, on the sandbox's port
    lab = re.search(r"-s (WALSH_BLOCKLIST_URL=\S+) -s (WALSH_BLOCKLIST_ALLOW_HTTP=True)", warning)
    assert lab and lab.group(0) in README.read_text(), warning
    served = lab.group(1).split("=", 1)[1].replace(":8000/", f":{server.port}/")
    server.origin.route("127.0.0.1", "/blocklist.json", Reply(200, EXAMPLE_BLOCKLIST.read_text()))
    (project / "urls.txt").write_text("http://www.example.org/page\n")
    await sleep(1.1)
    third = await run(
        crawl, project, {**OFFLINE, "WALSH_BLOCKLIST_URL": served, "WALSH_BLOCKLIST_ALLOW_HTTP": True}
    )
    err = third.err.decode()
    assert third.code == 0 and "Traceback" not in err, err[-3000:]
    assert [w for w in warnings(err) if "blocklist" in w] == [], err[-3000:]
    run3 = records(project)[2]
    assert [(r["outcome"], r["rule"]) for r in run3] == [("denied", "R3")], run3
