"""The package as published: one version, and the floors CI tests are the
floors pyproject.toml declares."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import scrapy_walsh_research

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_source_the_package():
    project = _pyproject()
    assert "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "scrapy_walsh_research.__version__"
    }
    assert re.fullmatch(r"\d+\.\d+\.\d+", scrapy_walsh_research.__version__)
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{scrapy_walsh_research.__version__}]" in changelog


def _release(version: str) -> tuple[int, ...]:
    """3.2, 3.2.0 and 3.2.0.post0 are one release."""
    release = list(Version(version).release)
    while release and release[-1] == 0:
        release.pop()
    return tuple(release)


def test_every_declared_floor_is_the_version_ci_installs():
    project = _pyproject()["project"]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for r in project["optional-dependencies"]["redis"]]
    pinned = {}
    for line in (ROOT / ".ci" / "constraints-floors.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pinned[name.lower()] = version
    for req in declared:
        floors = [s.version for s in req.specifier if s.operator == ">="]
        assert floors, f"{req} declares no minimum version"
        assert req.name.lower() in pinned, f"{req.name} is not in .ci/constraints-floors.txt"
        # the pin is the floor itself (a post release of it where the floor
        # was only published as one)
        assert _release(pinned[req.name.lower()]) == _release(floors[0]), (
            f"{req.name}: pyproject.toml says >={floors[0]}, CI tests "
            f"{pinned[req.name.lower()]}"
        )
