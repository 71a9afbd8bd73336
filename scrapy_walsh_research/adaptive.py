"""The adaptive half of R4/R5: how a host's answers set its interval.

R4 asks for at least max(1 s, Crawl-delay) between requests to a host; that
floor treats a struggling server exactly like a healthy one. This module is
the rule, written once, that every host clock applies to each answer (the
Redis clock runs the same rule in Lua, atomically; a test checks that both
agree step for step):

* **load**: the host's response time as the origin experienced it (from the
  request's bytes leaving to the response complete), smoothed as
  max(last answer, moving average): a slowdown is felt at the next request,
  a speed-up only gradually. The interval is at least ``factor`` times it, so
  the share of the host's time the bot occupies stays under 1 / ``factor``.
* **distress**: a 5xx or 429 (with or without Retry-After: ``Retry-After: 0``
  on every 503 must not keep the bot at full pace), a 408, a timeout, a
  refused, reset or dropped connection, or an answer so slow that
  ``factor`` times it passes the cap. Each raises the host's distress
  interval ``backoff`` times (plus up to 10 % jitter, never less) up to the
  cap; only ``recovery`` answers in a row without a signal bring it a step
  back down (and each further one another step, until the next signal), so
  it does not flap. A signal while it is at the cap gives the
  host up: its remaining targets are skipped (rule R5) for ``give_up``
  seconds, across restarts.

The defaults are in :mod:`scrapy_walsh_research.defaults` (see
``docs/adaptive.rst`` for the measurements behind them); the floors below
and :func:`problems` are what the start-up check refuses. It imports
exception classes and the defaults only: the clocks, the pacing gate and the
start-up check all use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy.exceptions import (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from twisted.internet import error as tx_error
from twisted.web.client import ResponseFailed

from scrapy_walsh_research import defaults

if TYPE_CHECKING:
    from collections.abc import Callable

#: the start-up check's floors: below them the rule stops protecting hosts
MIN_FACTOR = 4.0  # the bot's share of a slow host's time stays <= 25 %
MIN_MAX_DELAY = 30.0  # as long as the longest Crawl-delay honoured by default
MIN_BACKOFF = 2.0  # below it an outage is probed at nearly the floor pace
MIN_RECOVERY = 2  # with 1, a host that alternates errors and answers flaps

#: weight of a new answer in the moving average of response times
ALPHA = 0.2
#: up to this much is added to each raised distress interval
JITTER = 0.1

#: each setting's default and floor, for the start-up check's messages
SETTINGS = {
    "WALSH_ADAPTIVE_FACTOR": (defaults.WALSH_ADAPTIVE_FACTOR, MIN_FACTOR),
    "WALSH_ADAPTIVE_MAX_DELAY": (defaults.WALSH_ADAPTIVE_MAX_DELAY, MIN_MAX_DELAY),
    "WALSH_ADAPTIVE_BACKOFF": (defaults.WALSH_ADAPTIVE_BACKOFF, MIN_BACKOFF),
    "WALSH_ADAPTIVE_RECOVERY": (defaults.WALSH_ADAPTIVE_RECOVERY, MIN_RECOVERY),
    "WALSH_ADAPTIVE_GIVE_UP": (defaults.WALSH_ADAPTIVE_GIVE_UP, None),  # at least the max delay
}

# Scrapy wraps Twisted's errors in its own (2.14+); both are listed, since a
# download handler or middleware may raise either
_TIMEOUTS = (tx_error.TimeoutError, tx_error.TCPTimedOutError, DownloadTimeoutError)
_REFUSED = (tx_error.ConnectionRefusedError, DownloadConnectionRefusedError)
_LOST = (
    tx_error.ConnectionLost,
    tx_error.ConnectionDone,
    ResponseFailed,  # ResponseNeverReceived is one
    DownloadFailedError,  # Scrapy's ResponseFailed
    ResponseDataLossError,
)


@dataclass(frozen=True)
class AdaptivePolicy:
    """The ``WALSH_ADAPTIVE_*`` settings in force."""

    factor: float = defaults.WALSH_ADAPTIVE_FACTOR
    max_delay: float = defaults.WALSH_ADAPTIVE_MAX_DELAY
    backoff: float = defaults.WALSH_ADAPTIVE_BACKOFF
    recovery: int = defaults.WALSH_ADAPTIVE_RECOVERY
    give_up: float = defaults.WALSH_ADAPTIVE_GIVE_UP

    @classmethod
    def from_settings(cls, get: Callable[[str], Any]) -> AdaptivePolicy:
        """The policy from *get* (``settings.get``); an unset setting takes its
        default. Raises ``ValueError`` naming a setting that is not a number."""
        values: dict[str, float] = {}
        for name, (default, _) in SETTINGS.items():
            raw = get(name)
            if raw is None or raw == "":
                values[name] = float(default)
                continue
            try:
                value = float(raw)
            except (TypeError, ValueError):
                raise ValueError(f"{name}={raw!r} is not a number (default {default:g})") from None
            if not math.isfinite(value):
                raise ValueError(f"{name}={raw!r} is not a finite number (default {default:g})")
            values[name] = value
        return cls(
            factor=values["WALSH_ADAPTIVE_FACTOR"],
            max_delay=values["WALSH_ADAPTIVE_MAX_DELAY"],
            backoff=values["WALSH_ADAPTIVE_BACKOFF"],
            recovery=max(1, round(values["WALSH_ADAPTIVE_RECOVERY"])),
            give_up=values["WALSH_ADAPTIVE_GIVE_UP"],
        )


def problems(get: Callable[[str], Any]) -> list[str]:
    """Settings that would disable the adaptive rule or weaken it below its
    documented floor, each saying what to set (for the start-up check)."""
    try:
        policy = AdaptivePolicy.from_settings(get)
    except ValueError as exc:
        return [f"{exc}."]
    found = []
    checks = (
        ("WALSH_ADAPTIVE_FACTOR", policy.factor, MIN_FACTOR,
         "the interval is at least this many times a host's response time, so the bot "
         f"occupies a slow host at most 1/{MIN_FACTOR:g} of the time"),
        ("WALSH_ADAPTIVE_MAX_DELAY", policy.max_delay, MIN_MAX_DELAY,
         "it is the longest interval load or distress may set; lower, a struggling host "
         "would still be probed at nearly the floor pace"),
        ("WALSH_ADAPTIVE_BACKOFF", policy.backoff, MIN_BACKOFF,
         "each distress signal multiplies the host's interval by it; lower, an outage is "
         "probed at nearly the floor pace"),
        ("WALSH_ADAPTIVE_RECOVERY", float(policy.recovery), float(MIN_RECOVERY),
         "answers in a row without a signal before the interval comes down a step; lower, "
         "a host that alternates errors and answers is paced as if healthy half the time"),
    )  # fmt: skip
    for name, value, floor, why in checks:
        if value < floor:
            default = SETTINGS[name][0]
            found.append(
                f"{name}={get(name)!r}: {why}. Set {name} to {floor:g} or more "
                f"(default {default:g})."
            )
    if policy.give_up < policy.max_delay:
        found.append(
            f"WALSH_ADAPTIVE_GIVE_UP={get('WALSH_ADAPTIVE_GIVE_UP')!r}: a host given up "
            "(a distress signal at WALSH_ADAPTIVE_MAX_DELAY) is skipped this long; shorter "
            "than WALSH_ADAPTIVE_MAX_DELAY it would be probed again sooner than its interval. "
            f"Set WALSH_ADAPTIVE_GIVE_UP to {policy.max_delay:g} or more "
            f"(default {defaults.WALSH_ADAPTIVE_GIVE_UP:g})."
        )
    return found


def distress_signal(
    status: int | None = None, exception: BaseException | None = None
) -> str | None:
    """The distress an answer signals (a short name for stats and reasons), or None.

    Only what the host did counts: a DNS failure, a request the bundle did not
    send (a gate's denial, a grant that expired) or one it cancelled is not the
    host's distress.
    """
    if status is not None:
        if status >= 500 or status in (429, 408):
            return f"HTTP {status}"
        return None
    if isinstance(exception, _TIMEOUTS):
        return "timeout"
    if isinstance(exception, _REFUSED):
        return "connection refused"
    if isinstance(exception, _LOST):
        return "connection lost"
    return None


class Answer(NamedTuple):
    """One answer from a host, as the clock folds it in."""

    #: seconds from the request's bytes leaving to the response complete
    #: (None: no response, e.g. a timeout)
    response_time: float | None
    #: what :func:`distress_signal` said (None: an ordinary answer)
    signal: str | None
    #: a uniform draw in [0, 1) for the jitter (drawn by the caller, so that
    #: every backend computes the same interval from the same answer)
    jitter: float

    def distress(self, policy: AdaptivePolicy) -> str | None:
        """The signal, or ``slow answer`` when keeping ``factor`` x the
        response time would take more than the cap."""
        if self.signal is None and self.response_time is not None:
            if policy.factor * self.response_time > policy.max_delay:
                return "slow answer"
        return self.signal


@dataclass
class HostLoad:
    """What a host's answers say about it; all times in seconds.

    ``gave_up_until`` is on the clock of whoever holds the value (this
    process's monotonic clock in a host clock's view).
    """

    #: moving average of response times and the last one (0: none yet)
    average: float = 0.0
    last: float = 0.0
    #: the distress interval (0: none) and answers in a row without a signal
    distress: float = 0.0
    streak: int = 0
    gave_up_until: float = 0.0
    #: signals since the host was last at its floor, by kind
    signals: dict[str, int] = field(default_factory=dict)

    @property
    def load(self) -> float:
        """The smoothed response time: a slowdown counts at once, a speed-up gradually."""
        return max(self.last, self.average)

    def load_interval(self, policy: AdaptivePolicy) -> float:
        return min(policy.max_delay, policy.factor * self.load)

    def interval(self, policy: AdaptivePolicy) -> float:
        """The adaptive term of the host's interval (0 for a fast, healthy host)."""
        return max(self.load_interval(policy), self.distress)

    def describe(self) -> str:
        """The signals, for a reason: "HTTP 500 x4, timeout x1"."""
        return ", ".join(f"{k} x{v}" for k, v in sorted(self.signals.items())) or "none"

    def observe(self, answer: Answer, policy: AdaptivePolicy, floor: float, now: float) -> str:
        """Fold *answer* in; *floor* is the host's interval without this rule
        (max(WALSH_MIN_DELAY, Crawl-delay)). Returns what happened:
        ``raised``, ``gave_up``, ``eased``, ``recovered``, ``streak`` (a
        success counted towards easing) or ``load`` (only the response time
        changed)."""
        signal = answer.distress(policy)
        rt = answer.response_time
        if rt is not None:
            self.average = rt if self.average <= 0 else self.average + ALPHA * (rt - self.average)
            self.last = rt
        if signal is not None:
            self.signals[signal] = self.signals.get(signal, 0) + 1
            self.streak = 0
            if self.distress >= policy.max_delay:
                self.gave_up_until = max(self.gave_up_until, now + policy.give_up)
                return "gave_up"
            raised = max(floor, self.distress) * policy.backoff * (1 + JITTER * answer.jitter)
            self.distress = min(policy.max_delay, raised)
            return "raised"
        if self.distress <= 0:
            return "load"
        self.streak += 1
        if self.streak < policy.recovery:
            return "streak"
        # sustained: this answer and each one after it, until the next
        # signal, bring the interval down a step
        self.distress /= policy.backoff
        # within the jitter of the floor is the floor: not one more step of it
        if self.distress > floor * (1 + JITTER):
            return "eased"
        self.distress = 0.0
        self.streak = 0
        self.signals = {}
        return "recovered"

    def copy(self) -> HostLoad:
        return replace(self, signals=dict(self.signals))

    def as_json(self, to_wall: Callable[[float], float]) -> dict[str, Any]:
        """For a state store (*to_wall* maps ``gave_up_until`` onto wall time)."""
        return {
            "average": self.average,
            "last": self.last,
            "distress": self.distress,
            "streak": self.streak,
            "gave_up_until": to_wall(self.gave_up_until) if self.gave_up_until else 0.0,
            "signals": dict(self.signals),
        }

    @classmethod
    def from_json(cls, data: Any, to_mono: Callable[[float], float]) -> HostLoad:
        """The inverse of :meth:`as_json`; anything unreadable counts as nothing."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float:
            value = data.get(key)
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
            return 0.0

        signals = data.get("signals")
        return cls(
            average=number("average"),
            last=number("last"),
            distress=number("distress"),
            streak=int(number("streak")),
            gave_up_until=to_mono(number("gave_up_until")) if number("gave_up_until") else 0.0,
            signals={str(k): int(v) for k, v in signals.items() if isinstance(v, int)}
            if isinstance(signals, dict)
            else {},
        )


#: what a host clock answers for a host whose answers said nothing (read
#: only: the scheduler asks on every decision, for thousands of hosts)
IDLE = HostLoad()


def worth_noting(view: HostLoad, answer: Answer, policy: AdaptivePolicy, floor: float) -> bool:
    """Whether *answer* can change the host's interval: a signal, a host in
    distress (a success counts towards easing), or a response time whose
    load term reaches the floor. A fast answer from a healthy host changes
    nothing that pacing uses, and is not written anywhere."""
    if answer.signal is not None or view.distress > 0:
        return True
    rt = answer.response_time
    return rt is not None and policy.factor * max(rt, view.load) >= floor
