"""The sitemaps trust rules (R7 with sitemaps) as two small state machines
per origin and run, pure: no I/O, no Scrapy. The gate
(``gates/sitemaps.py``) reads and writes state, fetches, logs and denies;
what each thing it meets *means* is decided here.

The reading of an origin's sitemaps::

    LOADING --every document read, a claim among them--> READY
    LOADING --nothing claimed, or not read in time-----> OFF

The trust in what they claim (one probe at a time)::

    UNTESTED --a target claimed unchanged, with stored validators, sent--> PROBING
    PROBING  --its answer: unchanged (a 304, or its validators)---------> TRUSTED
    PROBING  --its answer: changed (a 200 with other validators)--------> DROPPED
    PROBING  --no verdict (an error, a redirect, no answer in time)-----> UNTESTED
                                            (DROPPED after PROBE_TRIES of them)
    TRUSTED  --another worker's probe contradicted it-------------------> DROPPED

What becomes of a due target with a past answer is a :class:`Step`
(:func:`step_for`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, NamedTuple

#: a probe that answers nothing conclusive is tried again on another target
#: at most this many times in a run
PROBE_TRIES = 3
#: claims of change answered before "every one was a 304" means anything
STALE_MIN_CLAIMS = 3


class Reading(Enum):
    """Where the reading of an origin's sitemaps is, in this run."""

    LOADING = "loading"
    READY = "ready"
    OFF = "off"


class Trust(Enum):
    """What this run makes of an origin's sitemaps' claims."""

    UNTESTED = "untested"
    PROBING = "probing"
    TRUSTED = "trusted"
    DROPPED = "dropped"


class ProbeAnswer(Enum):
    """What the probe's answer says of the sitemap's claim that it is unchanged."""

    #: a 304, or a 200 with the validators stored before it
    UNCHANGED = "unchanged"
    #: a 200 with other validators: the sitemap's claim was false
    CHANGED = "changed"
    #: nothing either way (an error status, a redirect, a failure, no answer in time)
    INCONCLUSIVE = "inconclusive"


class Step(Enum):
    """What becomes of a due target with a past answer."""

    #: sent as usual (no claim, no trust, or the probe itself)
    SEND = "send"
    #: sent as usual: the sitemap claims it changed, and its answer checks that
    CHANGE = "change"
    #: not requested: a trusted sitemap says it has not changed
    SKIP = "skip"
    #: kept aside while the probe is out
    PARK = "park"
    #: the probe is overdue: it counts as inconclusive, then the target is looked at again
    OVERDUE = "overdue"
    #: sent as usual, as the probe if it has stored validators
    PROBE = "probe"


class Claim(NamedTuple):
    """What a sitemap claims of one target."""

    lastmod: str
    #: the end of what the ``<lastmod>`` can mean, seconds since the epoch
    end: float
    #: the sitemap that claims it
    sitemap: str


@dataclass(frozen=True)
class TrustState:
    """The trust machine's state: the probe out, since when, and how many
    probes gave no verdict."""

    trust: Trust = Trust.UNTESTED
    probe: str | None = None
    #: the validators stored for the probe before it was sent
    validators: Mapping[str, Any] = field(default_factory=dict)
    since: float = 0.0
    tries: int = 0

    def probing(self, key: str) -> bool:
        """Whether *key* is the probe that is out."""
        return self.trust is Trust.PROBING and self.probe == key


def step_for(
    reading: Reading,
    state: TrustState,
    key: str,
    claim: Claim | None,
    answered: float,
    *,
    now: float,
    limit: float,
) -> Step:
    """What becomes of the due target *key*, last answered at *answered*,
    that the origin's sitemaps claim *claim* of (None: they say nothing of
    it); *limit*: how long a probe may be out before it counts as
    inconclusive."""
    if reading is not Reading.READY or state.trust is Trust.DROPPED or claim is None:
        return Step.SEND
    if claim.end > answered:
        return Step.CHANGE
    if state.trust is Trust.TRUSTED:
        return Step.SKIP
    if state.trust is Trust.UNTESTED:
        return Step.PROBE
    if state.probe == key:
        return Step.SEND
    return Step.PARK if now - state.since < limit else Step.OVERDUE


def probe_sent(
    state: TrustState, key: str, validators: Mapping[str, Any], now: float
) -> TrustState:
    """*key*, claimed unchanged and with stored *validators*, is sent as the probe."""
    if state.trust is not Trust.UNTESTED:
        return state
    return replace(state, trust=Trust.PROBING, probe=key, validators=validators, since=now)


def probe_answered(state: TrustState, answer: ProbeAnswer) -> TrustState:
    """The probe's answer (or its want of one) is in."""
    if state.trust is not Trust.PROBING:
        return state
    if answer is ProbeAnswer.UNCHANGED:
        return replace(state, trust=Trust.TRUSTED)
    if answer is ProbeAnswer.CHANGED:
        return replace(state, trust=Trust.DROPPED)
    tries = state.tries + 1
    trust = Trust.DROPPED if tries >= PROBE_TRIES else Trust.UNTESTED
    return replace(state, trust=trust, probe=None, tries=tries)


def contradicted_elsewhere(state: TrustState) -> TrustState:
    """Another worker's probe contradicted the sitemap: dropped here too."""
    return replace(state, trust=Trust.DROPPED, probe=None)


def probe_answer(
    status: int,
    *,
    redirected: bool,
    stored: Mapping[str, Any],
    etag: str | None,
    last_modified: str | None,
) -> ProbeAnswer:
    """What the probe's answer (*status*, and the validators it carries)
    says, against the validators *stored* before it was sent: a 304 or the
    same validators (the ETag when one was stored, else Last-Modified)
    confirm the claim; other validators contradict it. Only the target's
    own 2xx or 304 speaks of it: not an error, not another URL's answer."""
    if redirected or not (200 <= status < 300 or status == 304):
        return ProbeAnswer.INCONCLUSIVE
    if status == 304:
        return ProbeAnswer.UNCHANGED
    if stored.get("etag"):
        same = etag == stored["etag"]
    else:
        same = bool(stored.get("last_modified")) and last_modified == stored["last_modified"]
    return ProbeAnswer.UNCHANGED if same else ProbeAnswer.CHANGED


def claims_read(
    claims: Mapping[str, Claim], sitemap: str, lastmods: Mapping[str, tuple[str, float]]
) -> dict[str, Claim]:
    """*claims* with what *sitemap* claims (target -> lastmod, its end):
    of two claims about one target, the later lastmod wins."""
    merged = dict(claims)
    for key, (lastmod, end) in lastmods.items():
        known = merged.get(key)
        if known is None or end > known.end:
            merged[key] = Claim(lastmod, end, sitemap)
    return merged


def reading_done(claims: Mapping[str, Claim]) -> Reading:
    """Every document read: the claims are used, or there is nothing to use."""
    return Reading.READY if claims else Reading.OFF


@dataclass
class ClaimsOfChange:
    """The targets a sitemap claims changed, sent, and what their answers
    said: a sitemap whose every claim of change (:data:`STALE_MIN_CLAIMS` at
    least) was answered 304 says "changed" about everything."""

    out: set[str] = field(default_factory=set)
    unchanged: int = 0
    changed: int = 0

    def sent(self, key: str) -> None:
        self.out.add(key)

    def answered(self, key: str, status: int) -> bool:
        """Tally *key*'s answer; False when it is no claim of change out, or
        the answer is no copy (an error)."""
        if key not in self.out or not (200 <= status < 300 or status == 304):
            return False
        self.out.discard(key)
        if status == 304:
            self.unchanged += 1
        else:
            self.changed += 1
        return True

    @property
    def stale(self) -> bool:
        return self.unchanged >= STALE_MIN_CLAIMS and not self.changed
