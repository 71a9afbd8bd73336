"""The ``WALSH_ADAPTIVE_*`` settings: the adaptive policy in force, and the
floors below which the start-up check refuses it.

Below its floors the rule (:mod:`scrapy_walsh_research.state.hostload`)
stops protecting hosts: a factor under 4 lets the bot occupy a slow host more
than a quarter of the time, a cap under 30 s probes a struggling host at
nearly its floor pace. ``docs/adaptive.rst`` gives the measurements behind the
defaults (:mod:`scrapy_walsh_research.settings.defaults`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research.settings import defaults

if TYPE_CHECKING:
    from collections.abc import Callable

#: the start-up check's floors: below them the rule stops protecting hosts
MIN_FACTOR = 4.0  # the bot's share of a slow host's time stays <= 25 %
MIN_MAX_DELAY = 30.0  # as long as the longest Crawl-delay honoured by default
MIN_BACKOFF = 2.0  # below it an outage is probed at nearly the floor pace
MIN_RECOVERY = 2  # with 1, a host that alternates errors and answers flaps

#: each setting's default and floor, for the start-up check's messages
SETTINGS = {
    "WALSH_ADAPTIVE_FACTOR": (defaults.WALSH_ADAPTIVE_FACTOR, MIN_FACTOR),
    "WALSH_ADAPTIVE_MAX_DELAY": (defaults.WALSH_ADAPTIVE_MAX_DELAY, MIN_MAX_DELAY),
    "WALSH_ADAPTIVE_BACKOFF": (defaults.WALSH_ADAPTIVE_BACKOFF, MIN_BACKOFF),
    "WALSH_ADAPTIVE_RECOVERY": (defaults.WALSH_ADAPTIVE_RECOVERY, MIN_RECOVERY),
    "WALSH_ADAPTIVE_GIVE_UP": (defaults.WALSH_ADAPTIVE_GIVE_UP, None),  # at least the max delay
}


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
