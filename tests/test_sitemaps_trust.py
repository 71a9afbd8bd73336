"""The sitemaps trust rules (the part no crawl is needed for): what a due
target with a past answer meets, and what a probe's answer makes of the
sitemap's claims, as the pure state machine the gate drives
(``core/sitemap_trust.py``). The real crawls that check the gate keeps to
it are in ``test_r7_sitemaps.py``."""

from __future__ import annotations

import pytest

from scrapy_walsh_research.core.sitemap_trust import (
    PROBE_TRIES,
    STALE_MIN_CLAIMS,
    Claim,
    ClaimsOfChange,
    ProbeAnswer,
    Reading,
    Step,
    Trust,
    TrustState,
    claims_read,
    contradicted_elsewhere,
    probe_answer,
    probe_answered,
    probe_sent,
    reading_done,
    step_for,
)

KEY = "https://a.test/page"
OTHER = "https://a.test/other"
ANSWERED = 1_000.0
UNCHANGED = Claim("2020-01-01T00:00:00+00:00", ANSWERED - 1, "https://a.test/sitemap.xml")
VALIDATORS = {"etag": '"v1"', "last_modified": "Wed, 01 Jan 2020 00:00:00 GMT"}
LIMIT = 120.0


def step(state: TrustState, *, key: str = KEY, claim: Claim | None = UNCHANGED,
         reading: Reading = Reading.READY, now: float = 0.0) -> Step:  # fmt: skip
    return step_for(reading, state, key, claim, ANSWERED, now=now, limit=LIMIT)


def probing(key: str = KEY, since: float = 0.0) -> TrustState:
    return probe_sent(TrustState(), key, VALIDATORS, since)


# -- what a due target with a past answer meets --------------------------------------


@pytest.mark.parametrize("reading", [Reading.LOADING, Reading.OFF])
def test_no_target_is_skipped_while_the_sitemaps_are_not_read(reading):
    trusted = TrustState(Trust.TRUSTED)
    assert step(trusted, reading=reading) is Step.SEND


def test_a_target_the_sitemaps_say_nothing_of_is_sent_as_usual():
    assert step(TrustState(Trust.TRUSTED), claim=None) is Step.SEND


def test_a_claim_of_change_is_sent_and_its_answer_checks_it():
    changed = UNCHANGED._replace(end=ANSWERED + 1)
    assert step(TrustState(Trust.TRUSTED), claim=changed) is Step.CHANGE
    assert step(TrustState(), claim=changed) is Step.CHANGE


def test_a_lastmod_as_late_as_the_last_answer_is_a_claim_that_nothing_changed():
    at_answer = UNCHANGED._replace(end=ANSWERED)
    assert step(TrustState(Trust.TRUSTED), claim=at_answer) is Step.SKIP


def test_nothing_is_skipped_before_the_sitemap_has_earned_trust():
    assert step(TrustState()) is Step.PROBE


def test_a_trusted_sitemap_skips_what_it_says_has_not_changed():
    assert step(TrustState(Trust.TRUSTED)) is Step.SKIP


def test_a_dropped_sitemap_skips_nothing():
    assert step(TrustState(Trust.DROPPED)) is Step.SEND


def test_the_probe_itself_is_sent_when_it_comes_back_from_the_frontier():
    assert step(probing(KEY)) is Step.SEND


def test_other_unchanged_targets_wait_aside_while_the_probe_is_out():
    assert step(probing(KEY, since=0.0), key=OTHER, now=LIMIT - 1) is Step.PARK


def test_a_probe_out_longer_than_the_limit_is_overdue():
    assert step(probing(KEY, since=0.0), key=OTHER, now=LIMIT) is Step.OVERDUE


# -- the probe --------------------------------------------------------------------------


def test_only_an_untested_sitemap_sends_a_probe():
    out = probing(KEY)
    assert (out.trust, out.probe, out.validators) == (Trust.PROBING, KEY, VALIDATORS)
    assert probe_sent(out, OTHER, VALIDATORS, 5.0) == out
    trusted = TrustState(Trust.TRUSTED)
    assert probe_sent(trusted, KEY, VALIDATORS, 0.0) == trusted


def test_an_unchanged_answer_earns_the_sitemap_trust():
    assert probe_answered(probing(), ProbeAnswer.UNCHANGED).trust is Trust.TRUSTED


def test_a_changed_answer_drops_the_sitemap():
    assert probe_answered(probing(), ProbeAnswer.CHANGED).trust is Trust.DROPPED


def test_an_inconclusive_answer_lets_another_target_probe():
    after = probe_answered(probing(), ProbeAnswer.INCONCLUSIVE)
    assert (after.trust, after.probe, after.tries) == (Trust.UNTESTED, None, 1)
    assert step(after, key=OTHER) is Step.PROBE


def test_the_sitemap_is_dropped_after_too_many_inconclusive_probes():
    state = TrustState()
    for _ in range(PROBE_TRIES):
        assert state.trust is Trust.UNTESTED
        state = probe_answered(probe_sent(state, KEY, VALIDATORS, 0.0), ProbeAnswer.INCONCLUSIVE)
    assert state.trust is Trust.DROPPED


def test_an_answer_when_no_probe_is_out_changes_nothing():
    for state in (TrustState(), TrustState(Trust.TRUSTED), TrustState(Trust.DROPPED)):
        assert probe_answered(state, ProbeAnswer.CHANGED) == state


def test_another_workers_contradiction_drops_a_trusted_sitemap():
    assert contradicted_elsewhere(TrustState(Trust.TRUSTED)).trust is Trust.DROPPED


# -- what a probe's answer says -----------------------------------------------------------


def answer(status: int, *, etag: str | None = None, modified: str | None = None,
           stored: dict[str, str] = VALIDATORS, redirected: bool = False) -> ProbeAnswer:  # fmt: skip
    return probe_answer(status, redirected=redirected, stored=stored, etag=etag,
                        last_modified=modified)  # fmt: skip


def test_a_304_says_unchanged():
    assert answer(304) is ProbeAnswer.UNCHANGED


def test_a_200_with_the_stored_etag_says_unchanged():
    assert answer(200, etag='"v1"') is ProbeAnswer.UNCHANGED


def test_a_200_with_another_etag_says_changed_whatever_its_last_modified():
    assert answer(200, etag='"v2"', modified=VALIDATORS["last_modified"]) is ProbeAnswer.CHANGED
    assert answer(200, modified=VALIDATORS["last_modified"]) is ProbeAnswer.CHANGED


def test_without_a_stored_etag_the_last_modified_decides():
    only_date = {"last_modified": VALIDATORS["last_modified"]}
    same = answer(200, modified=VALIDATORS["last_modified"], stored=only_date)
    assert same is ProbeAnswer.UNCHANGED
    later = answer(200, modified="Thu, 02 Jan 2020 00:00:00 GMT", stored=only_date)
    assert later is ProbeAnswer.CHANGED
    assert answer(200, stored={}) is ProbeAnswer.CHANGED


@pytest.mark.parametrize("status", [404, 500, 503, 301])
def test_an_error_says_nothing_of_the_claim(status):
    assert answer(status) is ProbeAnswer.INCONCLUSIVE


def test_an_answer_through_a_redirect_is_another_urls_and_says_nothing():
    assert answer(304, redirected=True) is ProbeAnswer.INCONCLUSIVE


# -- reading the sitemaps -------------------------------------------------------------------


def test_of_two_claims_about_one_target_the_later_lastmod_wins():
    first = claims_read({}, "https://a.test/s1.xml", {KEY: ("2020-01-01", 10.0)})
    both = claims_read(first, "https://a.test/s2.xml", {KEY: ("2020-01-02", 20.0)})
    assert both[KEY] == Claim("2020-01-02", 20.0, "https://a.test/s2.xml")
    again = claims_read(both, "https://a.test/s3.xml", {KEY: ("2019-12-31", 5.0)})
    assert again[KEY].sitemap == "https://a.test/s2.xml"


def test_sitemaps_that_claim_nothing_are_not_used():
    assert reading_done({}) is Reading.OFF
    assert reading_done({KEY: UNCHANGED}) is Reading.READY


# -- claims of change -----------------------------------------------------------------------


def test_a_sitemap_whose_every_claim_of_change_answered_304_is_stale():
    changes = ClaimsOfChange()
    for n in range(STALE_MIN_CLAIMS):
        changes.sent(f"{KEY}{n}")
        assert changes.answered(f"{KEY}{n}", 304)
    assert changes.stale


def test_one_real_change_keeps_a_sitemap_from_being_stale():
    changes = ClaimsOfChange()
    for n in range(STALE_MIN_CLAIMS + 1):
        changes.sent(f"{KEY}{n}")
        changes.answered(f"{KEY}{n}", 200 if n == 0 else 304)
    assert not changes.stale


def test_too_few_claims_of_change_say_nothing_of_staleness():
    changes = ClaimsOfChange()
    changes.sent(KEY)
    changes.answered(KEY, 304)
    assert not changes.stale


def test_only_a_claim_of_change_out_answered_with_a_copy_is_counted():
    changes = ClaimsOfChange()
    assert not changes.answered(KEY, 304)  # never sent as a claim of change
    changes.sent(KEY)
    assert not changes.answered(KEY, 500)  # no copy: still out
    assert changes.answered(KEY, 304)
    assert not changes.answered(KEY, 304)  # counted once
    assert (changes.unchanged, changes.changed) == (1, 0)
