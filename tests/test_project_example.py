"""The README's main job and the attestation, as a user runs them: commands
in the example project, offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "example_project"


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
    # the sandbox's deliberate faults log WARNINGs: announced as such, first
    first, *rest = proc.stderr.splitlines()
    assert first.startswith("walsh-conformance: the sandbox injects faults on purpose")
    assert any("WARNING" in line for line in rest), proc.stderr


def fake_checkout(tmp_path: Path) -> Path:
    """The repository's scripts over a .venv whose python and scrapy only
    note how they were called (no network, no install)."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    (root / "example_project").mkdir()
    (root / "setup.py").write_text("")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "scrapy"):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\necho "{name} $* (in $(basename "$PWD"))" >> "{root}/calls"\n')
        exe.chmod(0o755)
    return root


def test_the_main_job_installs_only_what_the_check_needs(tmp_path):
    """scripts/conformance.sh: the package and its dependencies, not the test
    toolchain (mypy, sphinx, ruff, twine, hypothesis); .ci/run's set-up keeps it."""
    root = fake_checkout(tmp_path)
    run = subprocess.run(["bash", "scripts/conformance.sh", "-s", "X=1"], cwd=root,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    calls = (root / "calls").read_text().splitlines()
    installs = [c for c in calls if c.startswith("python -m pip install --quiet -e")]
    assert installs == [f"python -m pip install --quiet -e {root} (in checkout)"], calls
    assert calls[-1] == "scrapy walsh-conformance -s X=1 (in example_project)"
    (root / "calls").unlink()
    subprocess.run(["bash", "scripts/setup.sh"], cwd=root, check=True, timeout=60)
    assert f"-e {root}[test]" in (root / "calls").read_text()


@pytest.mark.parametrize("setting", ["CONCURRENT_REQUESTS=4", "WALSH_MIN_DELAY=0.5"])
def test_a_refused_configuration_fails_the_conformance_check(setting):
    """Refused once, naming the setting, and nothing checked (no rows)."""
    proc = scrapy("walsh-conformance", "-s", setting)
    assert proc.returncode == 1
    assert f"- {setting}:" in proc.stderr and "nothing was checked" in proc.stderr
    assert "[PASS]" not in proc.stdout and "Conformant" not in proc.stdout


def test_walsh_attest_prints_the_attestation_from_evidence():
    proc = scrapy("walsh-attest")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["spec"] == "walsh-research-compliance/v1"
    assert all(doc["requirements"].values())


def test_walsh_attest_names_the_blocklist_and_its_https():
    doc = json.loads(scrapy("walsh-attest").stdout)
    assert doc["blocklist"] == {
        "url": "https://wal.sh/.well-known/walsh-research/blocklist.json",
        "schema_url": "https://wal.sh/.well-known/walsh-research/blocklist.schema.json",
        "https": True,
    }


def test_walsh_attest_does_not_attest_r3_for_a_blocklist_over_plain_http():
    """WALSH_BLOCKLIST_ALLOW_HTTP lets a sandbox serve the list over http:
    nothing then protects its integrity, and R3 is not attested."""
    url = "http://operator.example/blocklist.json"
    proc = scrapy("walsh-attest", "-s", f"WALSH_BLOCKLIST_URL={url}",
                  "-s", "WALSH_BLOCKLIST_ALLOW_HTTP=True")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["blocklist"]["url"] == url and doc["blocklist"]["https"] is False
    assert doc["requirements"]["R3_operator_blocklist"] is False
    (reason,) = doc["evidence"]["R3_operator_blocklist"]["reason"]
    assert f"WALSH_BLOCKLIST_URL={url!r}" in reason and "integrity" in reason
    assert [k for k, held in doc["requirements"].items() if not held] == ["R3_operator_blocklist"]


def test_walsh_attest_is_false_for_a_disabled_gate():
    off = json.dumps({"scrapy_walsh_research.BlocklistMiddleware": None})
    proc = scrapy("walsh-attest", "-s", f"DOWNLOADER_MIDDLEWARES={off}")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["requirements"]["R3_operator_blocklist"] is False
    assert doc["requirements"]["R1_exact_user_agent"] is True
