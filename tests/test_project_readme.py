"""The README and the quick start, as a new user follows them: their blocks
are what the code requires, and their steps work in a fresh project."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings
from twisted.internet import defer, protocol

from scrapy_walsh_research import USER_AGENT, addon, components
from scrapy_walsh_research.core.blocklist.document import (
    check_shape,
    load_json,
    schema_validator,
    validate,
)
from scrapy_walsh_research.core.blocklist.schema import bundled_schema
from scrapy_walsh_research.sandbox import Reply
from scrapy_walsh_research.settings.check import advice, problems
from tests.support.crawling import BLOCKLIST_HOST, BLOCKLIST_PATH, SCHEMA_PATH, TDMREP, sleep
from tests.support.processes import _spawn

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.rst"
SCRAPY = str(Path(sys.executable).parent / "scrapy")


def by_hand_block(doc: Path) -> str:
    """The explicit-components block of *doc*, as a user copies it."""
    text = doc.read_text()
    if doc.suffix == ".md":
        match = re.search(r"```python\n((?:SPIDER_MODULES|DOWNLOADER_MIDDLEWARES) = .*?)```", text, re.S)
        assert match, f"no by-hand block in {doc.name}"
        return match.group(1)
    match = re.search(
        r"::\n\n((?:    (?:SPIDER_MODULES|DOWNLOADER_MIDDLEWARES) = .*?\n)(?:(?:    .*)?\n)*)", text
    )
    assert match, f"no by-hand block in {doc.name}"
    return "\n".join(line[4:] for line in match.group(1).splitlines()) + "\n"


def startproject(folder: Path, name: str = "shop") -> Path:
    """``scrapy startproject NAME`` in *folder*; returns its settings.py."""
    subprocess.run([SCRAPY, "startproject", name], cwd=folder, check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    return folder / name / name / "settings.py"


def project_settings(settings_py: Path) -> Settings:
    """The settings a project's settings.py gives, at project priority."""
    namespace: dict[str, Any] = {}
    exec(compile(settings_py.read_text(), str(settings_py), "exec"), namespace)
    settings = Settings()
    settings.setdict({k: v for k, v in namespace.items() if k.isupper()}, "project")
    return settings


#: add-on defaults the block may leave out, and why nothing is lost
NOT_NEEDED_BY_HAND = {
    "ROBOTSTXT_OBEY": "Scrapy's RobotsTxtMiddleware is set to None in the block",
    "LOG_FORMATTER": "only how a record of a target not fetched is logged",
}


@pytest.mark.parametrize("doc", [QUICKSTART], ids=lambda p: p.name)
def test_the_by_hand_block_is_what_the_addon_wires(tmp_path, doc):
    """Appended to a fresh project's settings.py, the block enables exactly
    the components the add-on does, at its orders, with its defaults, and
    the start-up check finds nothing to refuse or advise."""
    settings_py = startproject(tmp_path)
    settings_py.write_text(settings_py.read_text() + "\n" + by_hand_block(doc))
    by_hand = project_settings(settings_py)
    with_addon = Settings()
    addon.Addon.update_pre_crawler_settings(with_addon)
    addon.Addon().update_settings(with_addon)
    for name in ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS"):
        assert components.enabled(by_hand, name) == components.enabled(with_addon, name), name
    for name in ("SCHEDULER", "DOWNLOAD_HANDLERS"):
        assert by_hand[name] == with_addon[name], name
    assert by_hand.getlist("SPIDER_MODULES")[0] == addon.SPIDERS_MODULE
    for name, value in addon.DEFAULTS.items():
        if name not in NOT_NEEDED_BY_HAND:
            assert by_hand[name] == value, name
    assert problems(by_hand) == [] and advice(by_hand) == []


@pytest.mark.parametrize("doc", [QUICKSTART], ids=lambda p: p.name)
@pytest_twisted.ensureDeferred
async def test_a_fresh_project_with_the_by_hand_block_crawls_targets(server, tmp_path, doc):
    settings_py = startproject(tmp_path)
    settings_py.write_text(settings_py.read_text() + "\n" + by_hand_block(doc))
    project = settings_py.parent.parent
    server.origin.route("shop.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("shop.test", "/item", Reply(200, "an item"))
    urls = project / "urls.txt"
    urls.write_text(server.url("shop.test", "/item") + "\n")
    out = project / "out.jl"
    proc = _spawn(
        server, f"list={urls}", tmp_path / "state",
        {"FEEDS": json.dumps({str(out): {"format": "jsonlines"}})}, project=project,
    )  # fmt: skip
    await proc.ended
    assert b"Traceback" not in proc.err, proc.err.decode()[-3000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["outcome"] == "fetched"
    assert [h.path for h in server.origin.hits_for("shop.test")] == ["/robots.txt", TDMREP, "/item"]
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}


class Command(protocol.ProcessProtocol):
    """A command in a child process (the sandbox origin runs in this one's reactor)."""

    def __init__(self) -> None:
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.out = b""
        self.err = b""
        self.code: int | None = None

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Any) -> None:
        self.code = reason.value.exitCode
        self.ended.callback(None)


async def run(argv: list[str], cwd: Path, sandbox: dict[str, Any] | None = None) -> Command:
    """*argv* as written (``scrapy ...``), in *cwd*; *sandbox*: the settings
    that point it at the loopback origin, given with ``-s``."""
    from twisted.internet import reactor

    assert argv[0] == "scrapy", argv
    args = [SCRAPY, *argv[1:]]
    for name, value in (sandbox or {}).items():
        args += ["-s", f"{name}={value}"]
    env = {k: v for k, v in os.environ.items() if k != "SCRAPY_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join([str(cwd), *sys.path])
    proc = Command()
    reactor.spawnProcess(proc, SCRAPY, args, env=env, path=str(cwd))
    await proc.ended
    return proc


def readme_command(prefix: str) -> list[str]:
    """The README's command line that starts with *prefix*, without its comment."""
    for line in README.read_text().splitlines():
        if line.startswith(prefix):
            return shlex.split(line, comments=True)
    raise AssertionError(f"the README has no command starting {prefix!r}")


def readme_block(first: str) -> str:
    """The README's fenced block whose first line starts with *first*."""
    match = re.search(rf"```[a-z]*\n({re.escape(first)}.*?)```", README.read_text(), re.S)
    assert match, f"the README has no block starting {first!r}"
    return match.group(1)


EXAMPLE_BLOCKLIST = ROOT / "docs" / "examples" / "blocklist.json"
MARKDOWN_PAGE = "\n\n".join(f"## Part {i}\n\nSee [item {i}](/item/{i})." for i in range(400))
RSS = ('<?xml version="1.0"?><rss version="2.0"><channel><title>News</title>'
       "<item><guid>a</guid><title>A</title></item></channel></rss>")  # fmt: skip


@pytest_twisted.ensureDeferred
async def test_a_new_user_follows_the_readme_in_a_fresh_project(server, tmp_path):
    """Install aside (the package under test is installed), the README's
    steps as written: startproject, the ADDONS line, the list in its format
    (with a new user's slips: a BOM, CRLF, a note, a stray line, a URL too
    long for Scrapy), the crawl command twice (a re-run inside the day keeps
    the first run's records), then the operator commands; the operator's
    blocklist is the example file the operator docs give."""
    # startproject, and the one ADDONS line
    (name,) = re.findall(r"`scrapy startproject (\w+) && cd \1`", README.read_text())
    startproject(tmp_path, name)
    project = tmp_path / name
    settings_py = project / name / "settings.py"
    settings_py.write_text(settings_py.read_text() + "\n" + readme_block("ADDONS = "))

    # the sandbox: the example blocklist, and the README's example list's site
    server.origin.route(BLOCKLIST_HOST, BLOCKLIST_PATH, Reply(200, EXAMPLE_BLOCKLIST.read_text()))
    site = server.url("site.test", "")
    server.origin.route("site.test", "/robots.txt", Reply(200, "User-agent: *\nAllow: /\n"))
    server.origin.route("site.test", "/feed.xml", Reply(200, RSS, {"Content-Type": "application/rss+xml"}))
    server.origin.route("site.test", "/guide.md", Reply(200, MARKDOWN_PAGE, {"Content-Type": "text/markdown"}))
    example = readme_block("# urls.txt").replace("https://example.org", site)
    lines = [
        *example.splitlines(),
        "http://www.example.org/page   # example.org is in the example blocklist",
        f"{site}/search?q={'x' * 2100}",
        "see https://example.net/ too",
    ]
    (project / "urls.txt").write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    sandbox = {
        "WALSH_BLOCKLIST_URL": server.url(BLOCKLIST_HOST, BLOCKLIST_PATH),
        "WALSH_BLOCKLIST_SCHEMA_URL": server.url(BLOCKLIST_HOST, SCHEMA_PATH),
        "WALSH_BLOCKLIST_ALLOW_HTTP": True,
        "TWISTED_DNS_RESOLVER": "scrapy_walsh_research.sandbox.origin.SandboxDNSResolver",
    }

    # the crawl, as written, twice
    crawl = readme_command("scrapy crawl targets")
    first = await run(crawl, project, sandbox)
    await sleep(1.1)  # the export file is named by the second it started
    second = await run(crawl, project, sandbox)
    for proc in (first, second):
        err = proc.err.decode()
        assert proc.code == 0, err[-3000:]
        assert "Traceback" not in err and "[markdown_it" not in err, err[-3000:]
    runs = [
        sorted((json.loads(r) for r in path.read_text().splitlines()), key=lambda r: r["line"])
        for path in sorted((project / "records").glob("*.jsonl"))
    ]
    assert len(runs) == 2
    outcomes = [[(r["line"], r["outcome"], r["rule"]) for r in records] for records in runs]
    assert outcomes[0] == [
        (2, "fetched", None), (3, "fetched", None), (4, "denied", "R3"),
        (5, "invalid", None), (6, "invalid", None),
    ]
    assert outcomes[1][:2] == [(2, "skipped", "R8"), (3, "skipped", "R8")]
    assert runs[0][0]["url"] == f"{site}/feed.xml" and runs[0][1]["structured"] == "markdown"
    assert "URLLENGTH_LIMIT" in runs[0][3]["reason"]
    assert "email opt-out" in runs[0][2]["reason"]
    paths = [h.path for h in server.origin.hits_for("site.test")]
    assert paths == ["/robots.txt", TDMREP, "/feed.xml", "/guide.md"]  # the second run sent nothing
    assert {h.user_agent for h in server.origin.hits} == {USER_AGENT}
    assert server.origin.hits_for("www.example.org") == []
    state = project / ".scrapy" / "walsh"  # where the README says state lives
    assert (state / "state.sqlite3").is_file() and (state / "audit.sqlite3").is_file()

    # the operator's commands
    keys = await run(readme_command("scrapy walsh-keys generate"), project)
    assert keys.code == 0, keys.err.decode()[-2000:]
    assert (project / "keys" / "walsh.pem").stat().st_mode & 0o777 == 0o600
    attest = await run(readme_command("scrapy walsh-attest  "), project)
    assert attest.code == 0, attest.err.decode()[-2000:]
    assert all(json.loads(attest.out)["requirements"].values())


def test_the_example_blocklist_is_a_valid_document():
    document = load_json(EXAMPLE_BLOCKLIST.read_bytes())
    check_shape(document, "walsh-research-blocklist/v1")
    assert validate(document, schema_validator(bundled_schema()), None, "bundled") is None


def test_the_readme_installs_from_a_checkout_before_naming_an_index():
    """The package is not on PyPI yet: the first install command must work."""
    install = README.read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in install.splitlines() if line.startswith("pip install")]
    assert commands and commands[0].startswith("pip install ./scrapy-walsh-research")
    assert "pip install scrapy-walsh-research " not in "\n".join(commands) + " "


@pytest.mark.parametrize("doc", [README, QUICKSTART], ids=lambda p: p.name)
def test_no_placeholder_stands_where_a_user_copies_a_command(doc):
    assert not re.search(r"<(git host|owner|your[^>]*)>", doc.read_text())


def test_the_readme_is_a_front_page_that_links_to_the_by_hand_block():
    """At most 200 lines: the long blocks and tables live in docs/."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert "docs/quickstart.rst#in-your-project" in text
    assert "DOWNLOADER_MIDDLEWARES = {" in QUICKSTART.read_text()
