"""The README's main job: ``scrapy walsh-demo`` in the example project, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent.parent / "example_project"


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    scrapy = Path(sys.executable).parent / "scrapy"
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return subprocess.run(
        [str(scrapy), "walsh-demo", *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_the_example_project_passes_every_sandbox_check():
    proc = run_demo()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed" in proc.stdout
    assert "FAIL" not in proc.stdout


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("CONCURRENT_REQUESTS=4", "CONCURRENT_REQUESTS=4"),
        ("REDIRECT_MAX_TIMES=9", "REDIRECT_MAX_TIMES=9"),
    ],
)
def test_a_broken_configuration_makes_the_main_job_fail(setting, message):
    proc = run_demo("-s", setting)
    assert proc.returncode != 0
    assert message in proc.stderr and "refusing to crawl" in proc.stderr
