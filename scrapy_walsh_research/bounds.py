"""Bounds on the in-memory caches that grow with hosts and targets.

A list of 10^5 targets over 10^4 hosts must not keep 10^4 parsed robots.txt
files, host clocks and 10^5 cadence times in memory at once. Each cache is a
least-recently-used window over state that is also in the state store; what
falls out is read back from there when needed, never refetched from the host
sooner than it would have been, and never lets a request go sooner than its
interval. Correctness lives in the store and the gates; the caches only make
them fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.errors import WalshConfigurationError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def cache_size(settings: BaseSettings, name: str, default: int) -> int:
    """The bound set by *name*, checked at start-up: a whole number, at least 1."""
    raw = settings.get(name, default)
    try:
        value = int(raw)
        if value != float(raw):
            raise ValueError
    except (TypeError, ValueError):
        raise WalshConfigurationError(
            f"{name}={raw!r}: a cache bound is a whole number of entries (default {default})."
        ) from None
    if value < 1:
        raise WalshConfigurationError(
            f"{name}={value}: a cache needs room for at least one entry; "
            f"set {name} to 1 or more (default {default})."
        )
    return value
