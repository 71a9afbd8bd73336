"""The conformance check passes for a conformant project, turns a row to FAIL
when its gate is broken, and the attestation reports only what evidence shows."""

from __future__ import annotations

from typing import Any

import pytest
import pytest_twisted
from scrapy.crawler import Crawler
from scrapy.settings import Settings
from scrapy.utils.defer import deferred_from_coro

from scrapy_walsh_research.components import (
    BLOCKLIST_MW,
    CADENCE_MW,
    PACING_MW,
    PREFERENCES_MW,
    RETRY_MW,
    ROBOTS_MW,
    SCOPE_MW,
    USERAGENT_MW,
)
from scrapy_walsh_research.conformance.checks import HTTP_CACHE_ROW
from scrapy_walsh_research.conformance.run import run_conformance
from scrapy_walsh_research.evidence.attestation import REQUIREMENTS, attest, holds
from scrapy_walsh_research.evidence.verdicts import ConformanceResult
from scrapy_walsh_research.identity.signing import generate_key
from scrapy_walsh_research.settings.check import apply_addons
from scrapy_walsh_research.spiders.targets import TargetsSpider

SCRAPY_HTTP11 = "scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler"


def project(**overrides: Any) -> Settings:
    """An ordinary project with the one ADDONS line."""
    return Settings(
        {
            "ADDONS": {"scrapy_walsh_research.Addon": 0},
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            **overrides,
        }
    )


async def conformance(settings: Settings, tmp_path: Any) -> ConformanceResult:
    return await deferred_from_coro(run_conformance(settings, TargetsSpider, tmp_path))


def failing(report: ConformanceResult) -> set[str]:
    return {c.id for c in report.checks if not c.passed}


@pytest_twisted.ensureDeferred
async def test_a_conformant_project_passes_every_check(tmp_path):
    report = await conformance(project(), tmp_path)
    assert len(report.checks) >= 35
    assert failing(report) == set(), report.table()
    assert report.must_pass
    assert all(c.measured for c in report.checks)  # every row shows what was measured
    # unsigned, and said so: no identity rows, a note
    assert "ID" not in {c.id for c in report.checks}
    assert any("unsigned" in note for note in report.notes)
    assert "Note: requests are unsigned" in report.table()


@pytest_twisted.ensureDeferred
async def test_a_signing_project_passes_every_identity_row(tmp_path):
    key = tmp_path / "walsh.pem"
    generate_key(key)
    report = await conformance(project(WALSH_SIGNING_KEY=str(key)), tmp_path / "run")
    identity = [c for c in report.checks if c.id == "ID"]
    assert len(identity) == 6
    assert failing(report) == set(), report.table()
    assert not report.notes


@pytest_twisted.ensureDeferred
async def test_signatures_that_never_reach_the_wire_fail_the_identity_rows(tmp_path, monkeypatch):
    from scrapy_walsh_research.scheduling.departure import Departure

    # signing is on and each request is handed to be signed: nothing is added
    monkeypatch.setattr(Departure, "sign", lambda self, tx_request, request: None)
    key = tmp_path / "walsh.pem"
    generate_key(key)
    report = await conformance(project(WALSH_SIGNING_KEY=str(key)), tmp_path / "run")
    rows = {c.title: c for c in report.checks if c.id == "ID"}
    verified = next(c for t, c in rows.items() if t.startswith("every request verified"))
    assert not verified.passed and "unsigned" in verified.measured
    assert not report.must_pass


BROKEN = {
    "R1": {"DOWNLOADER_MIDDLEWARES": {USERAGENT_MW: None}, "USER_AGENT": "SomethingElse/2.0"},
    "R2": {"DOWNLOADER_MIDDLEWARES": {ROBOTS_MW: None}},
    "R3": {"DOWNLOADER_MIDDLEWARES": {BLOCKLIST_MW: None}},
    "R4": {"DOWNLOADER_MIDDLEWARES": {PACING_MW: None}},
    "R5": {
        "DOWNLOADER_MIDDLEWARES": {
            RETRY_MW: None,
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": 550,
        }
    },
    "R6": {"DOWNLOADER_MIDDLEWARES": {SCOPE_MW: None}},
    "PREF": {"DOWNLOADER_MIDDLEWARES": {PREFERENCES_MW: None}},
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
@pytest_twisted.ensureDeferred
async def test_breaking_a_gate_turns_its_rows_to_fail(tmp_path, rule, without_preflight):
    report = await conformance(project(**BROKEN[rule]), tmp_path)
    # the HTTP cache row fails too (the check is off): look at the gate's own rows
    gate_rows = {c.id for c in report.checks if not c.passed and c.title != HTTP_CACHE_ROW}
    assert rule in gate_rows, report.table()
    assert not report.must_pass


@pytest_twisted.ensureDeferred
async def test_the_http_cache_row_fails_when_the_setting_is_not_refused(
    tmp_path, without_preflight
):
    report = await conformance(project(), tmp_path)
    assert [c.title for c in report.checks if not c.passed] == [HTTP_CACHE_ROW], report.table()
    row = next(c for c in report.checks if c.title == HTTP_CACHE_ROW)
    assert row.level == "MUST" and row.measured.startswith("not refused")
    assert not report.must_pass


@pytest_twisted.ensureDeferred
async def test_a_refused_configuration_fails_every_row_with_the_reason(tmp_path):
    report = await conformance(project(CONCURRENT_REQUESTS=8), tmp_path)
    assert not any(c.passed for c in report.checks)
    assert all(
        "crawl refused" in c.measured and "CONCURRENT_REQUESTS" in c.measured for c in report.checks
    )


def effective(settings: Settings) -> Settings:
    crawler = Crawler(TargetsSpider, settings)
    apply_addons(crawler)
    return crawler.settings


def test_attestation_from_configuration_is_true_only_with_every_gate_in_place():
    doc = attest(effective(project()))
    assert set(doc["requirements"]) == set(REQUIREMENTS)
    assert all(doc["requirements"].values()), doc["evidence"]
    assert doc["refused"] == [] and holds(doc)
    assert {"tool", "version", "spec", "user_agent", "settings_sha256"} <= set(doc)
    assert all(e["conformance"].startswith("not run") for e in doc["evidence"].values())


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"DOWNLOADER_MIDDLEWARES": {ROBOTS_MW: None}}, "R2_robots_rfc9309"),
        ({"DOWNLOADER_MIDDLEWARES": {BLOCKLIST_MW: None}}, "R3_operator_blocklist"),
        ({"DOWNLOADER_MIDDLEWARES": {PREFERENCES_MW: None}}, "PREF_usage_preferences"),
        ({"CONCURRENT_REQUESTS": 4}, "R4_serial_rate_limit_crawl_delay"),
        (
            {"CONCURRENT_REQUESTS": 3, "DOWNLOAD_HANDLERS": {"http": SCRAPY_HTTP11}},
            "R4_serial_rate_limit_crawl_delay",
        ),
        ({"DOWNLOADER_MIDDLEWARES": {CADENCE_MW: None}}, "R8_infrequent_runs"),
        ({"WALSH_RUN_INTERVAL": 3600}, "R8_infrequent_runs"),
    ],
)
def test_attestation_reports_false_with_a_reason_for_a_disabled_gate(overrides, key):
    doc = attest(effective(project(**overrides)))
    assert doc["requirements"][key] is False
    assert not holds(doc)
    assert doc["evidence"][key]["reason"]
    others = [k for k, v in doc["requirements"].items() if not v]
    assert len(others) < len(REQUIREMENTS)  # the rest still stand on their own evidence


def test_the_settings_hash_changes_with_the_settings():
    a = attest(effective(project()))["settings_sha256"]
    b = attest(effective(project()))["settings_sha256"]
    c = attest(effective(project(WALSH_MIN_DELAY=2.0)))["settings_sha256"]
    assert a == b != c


@pytest_twisted.ensureDeferred
async def test_attestation_with_a_conformance_run_carries_the_measurements(tmp_path):
    settings = project()
    report = await conformance(settings, tmp_path)
    doc = attest(effective(project()), report)
    assert all(doc["requirements"].values())
    rows = doc["evidence"]["R4_serial_rate_limit_crawl_delay"]["conformance"]
    assert any("min same-host gap" in r["measured"] for r in rows)
    assert doc["conformance_must_pass"] is True and holds(doc)
    # a MUST row no requirement reads (the audit log) still decides
    audit = next(c for c in report.checks if c.id == "AUD" and c.level == "MUST")
    audit.passed = False
    doc = attest(effective(project()), report)
    assert all(doc["requirements"].values())
    assert doc["conformance_must_pass"] is False and not holds(doc)


@pytest_twisted.ensureDeferred
async def test_attestation_is_false_where_the_conformance_run_fails(tmp_path, without_preflight):
    report = await conformance(project(**BROKEN["R4"]), tmp_path)
    doc = attest(effective(project()), report)
    assert doc["requirements"]["R4_serial_rate_limit_crawl_delay"] is False
    assert any(
        "conformance check failed" in r
        for r in doc["evidence"]["R4_serial_rate_limit_crawl_delay"]["reason"]
    )


@pytest_twisted.ensureDeferred
async def test_an_audit_log_that_misses_requests_fails_its_row(tmp_path, monkeypatch):
    from scrapy_walsh_research.evidence.audit import AuditTrail

    monkeypatch.setattr(AuditTrail, "sent", lambda self, request, kind: None)
    report = await conformance(project(), tmp_path)
    (row,) = [c for c in report.checks if c.id == "AUD"]
    assert not row.passed and "0 logged" in row.measured
    assert not report.must_pass
