"""The README's main job and the attestation, as a user runs them: commands
in the example project, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent.parent / "example_project"


def scrapy(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "scrapy"
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    env.pop("SCRAPY_SETTINGS_MODULE", None)
    return subprocess.run(
        [str(exe), *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_conformance_check_passes_for_the_example_project():
    proc = scrapy("walsh-conformance")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[FAIL]" not in proc.stdout
    assert "Conformant." in proc.stdout


@pytest.mark.parametrize("setting", ["CONCURRENT_REQUESTS=4", "WALSH_MIN_DELAY=0.5"])
def test_a_refused_configuration_fails_the_conformance_check(setting):
    proc = scrapy("walsh-conformance", "-s", setting)
    assert proc.returncode == 1
    assert "crawl refused" in proc.stdout and "NOT conformant" in proc.stdout


def test_walsh_attest_prints_the_attestation_from_evidence():
    proc = scrapy("walsh-attest")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["spec"] == "walsh-research-compliance/v1"
    assert all(doc["requirements"].values())


def test_walsh_attest_is_false_for_a_disabled_gate():
    off = json.dumps({"scrapy_walsh_research.blocklist.BlocklistMiddleware": None})
    proc = scrapy("walsh-attest", "-s", f"DOWNLOADER_MIDDLEWARES={off}")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["requirements"]["R3_operator_blocklist"] is False
    assert doc["requirements"]["R1_exact_user_agent"] is True
