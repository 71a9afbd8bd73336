"""The README and the quick start, as a new user follows them: their blocks
are what the code requires, and their steps work in a fresh project."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from scrapy.settings import Settings

from scrapy_walsh_research import USER_AGENT, addon, components
from scrapy_walsh_research.preflight import advice, problems
from scrapy_walsh_research.sandbox import Reply
from tests.conftest import TDMREP, _spawn

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
}


@pytest.mark.parametrize("doc", [README, QUICKSTART], ids=lambda p: p.name)
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


@pytest.mark.parametrize("doc", [README, QUICKSTART], ids=lambda p: p.name)
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
