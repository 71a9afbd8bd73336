"""The package's shape: a layout that shows the architecture and stays that
way. The public API is the component paths users write in settings; the pure
core loads no Scrapy. (Import cycles and layers: ``lint-imports`` in CI.)"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "scrapy_walsh_research"

#: the paths the README and docs tell users to write in settings
PUBLIC_PATHS = sorted(
    {
        path
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.rst"))]
        for path in re.findall(
            r"scrapy_walsh_research\.(?:[a-z_]+\.)*[A-Z][A-Za-z0-9]+", doc.read_text()
        )
    }
)


def test_the_docs_name_the_component_paths_users_write():
    # the gates, the scheduler, the download handler, the pipeline, the addon
    assert len(PUBLIC_PATHS) >= 15, PUBLIC_PATHS


@pytest.mark.parametrize("path", PUBLIC_PATHS)
def test_every_component_path_the_docs_give_is_importable(path):
    module, _, name = path.rpartition(".")
    assert hasattr(importlib.import_module(module), name), path


def test_the_pure_core_loads_neither_scrapy_nor_twisted():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (PACKAGE / "core").rglob("[!_]*.py")
    )
    assert "scrapy_walsh_research.core.blocklist.child" in modules  # subpackages too
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('scrapy', 'twisted'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "", out.stdout


def test_no_module_grows_past_the_size_a_reader_takes_in():
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    # about 500 lines; the largest today are the targets spider (530), the
    # start-up check (527) and the Redis scripts (Lua text, 526)
    assert {p: n for p, n in sizes.items() if n > 540} == {}


def test_no_function_grows_long_without_saying_why():
    """Over about 80 lines, a function says in its docstring or first
    comment why it is long (a flat list of checks, a page written in
    order)."""
    long = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.end_lineno is None or node.end_lineno - node.lineno + 1 <= 80:
                continue
            head = "\n".join(lines[node.lineno - 1 : node.lineno + 15]).lower()
            if "long" not in head:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert long == []
