"""Persistent politeness state: one store per crawler, behind a small interface.

Everything that must survive a restart (the adopted blocklist, last good
robots.txt copies, later validators and cadence) goes through
:class:`StateStore`, so a shared backend (Redis) can replace the embedded
SQLite one without touching the gates.
"""

from __future__ import annotations

from scrapy_walsh_research.state.base import StateStore, clock_for, local_state_for, state_for
from scrapy_walsh_research.state.sqlite import SQLiteStateStore

__all__ = ["SQLiteStateStore", "StateStore", "clock_for", "local_state_for", "state_for"]
