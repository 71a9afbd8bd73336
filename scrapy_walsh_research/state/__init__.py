"""Persistent politeness state: one store per crawler, behind a small interface.

Everything that must survive a restart (the adopted blocklist, last good
robots.txt copies, later validators and cadence) goes through
:class:`StateStore`, so a shared backend (Redis) can replace the embedded
SQLite one without touching the gates.

* :mod:`~scrapy_walsh_research.state.protocols`: the interfaces
  (:class:`StateStore`, :class:`HostClock`, :class:`CadenceStore`), importing
  no backend;
* :mod:`~scrapy_walsh_research.state.factory`: the one place that picks a
  backend (:func:`state_for`, :func:`clock_for`, :func:`cadence_for`,
  :func:`local_state_for`);
* the embedded backend: :mod:`~scrapy_walsh_research.state.sqlite`,
  :mod:`~scrapy_walsh_research.state.hostclock` and
  :mod:`~scrapy_walsh_research.state.cadence`, in the state directory
  (:mod:`~scrapy_walsh_research.state.directory`);
* the shared backend: :mod:`scrapy_walsh_research.state.redis`.
"""

from __future__ import annotations

from scrapy_walsh_research.state.factory import (
    cadence_for,
    clock_for,
    local_state_for,
    redis_for,
    redis_url,
    settings_for,
    state_for,
)
from scrapy_walsh_research.state.protocols import CadenceStore, FlightBusy, HostClock, StateStore
from scrapy_walsh_research.state.sqlite import SQLiteStateStore

__all__ = [
    "CadenceStore",
    "FlightBusy",
    "HostClock",
    "SQLiteStateStore",
    "StateStore",
    "cadence_for",
    "clock_for",
    "local_state_for",
    "redis_for",
    "redis_url",
    "settings_for",
    "state_for",
]
