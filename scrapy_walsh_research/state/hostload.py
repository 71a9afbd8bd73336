"""What a host's answers say about it, and the rule every host clock
applies to each answer: the adaptive half of R4/R5 (docs/adaptive.rst).

* **load**: the host's response time as the origin experienced it (from the
  request's bytes leaving to the response complete), smoothed as
  max(last answer, moving average): a slowdown is felt at the next request,
  a speed-up only gradually. The interval is at least ``factor`` times it, so
  the share of the host's time the bot occupies stays under 1 / ``factor``.
* **distress**: a signal (what counts as one:
  :func:`scrapy_walsh_research.scheduling.adaptive.distress_signal`), or an
  answer so slow that ``factor`` times it passes the cap, raises the host's
  distress interval ``backoff`` times (plus up to 10 % jitter, never less) up
  to the cap; only ``recovery`` answers in a row without a signal bring it a
  step back down (and each further one another step, until the next
  signal), so it does not flap. A signal while it is at the cap gives the
  host up: its remaining targets are skipped (rule R5) for ``give_up``
  seconds, across restarts.

The rule is written once, here, and applied by every host clock; the Redis
clock runs the same rule in Lua, atomically (``state/redis/scripts.py``:
``ANSWER``), and a test checks that both agree step for step. The policy in
force (the ``WALSH_ADAPTIVE_*`` settings) is
:class:`scrapy_walsh_research.settings.adaptive.AdaptivePolicy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy_walsh_research.settings.adaptive import AdaptivePolicy

#: weight of a new answer in the moving average of response times
ALPHA = 0.2
#: up to this much is added to each raised distress interval
JITTER = 0.1


class Answer(NamedTuple):
    """One answer from a host, as the clock folds it in."""

    #: seconds from the request's bytes leaving to the response complete
    #: (None: no response, e.g. a timeout)
    response_time: float | None
    #: what :func:`~scrapy_walsh_research.scheduling.adaptive.distress_signal`
    #: said (None: an ordinary answer)
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
