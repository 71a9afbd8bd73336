"""Visit-time windows (the 1996 robots.txt extension proposal): when a
site wants robots to visit, as UTC times of day.

``Visit-time: 0400-0845`` asks a robot to visit only between 04:00 and
08:45 UTC; ``2200-0300`` wraps midnight. Protego reads one such line
(:meth:`protego.Protego.visit_time`); what it does not do is written here:
it keeps the last line of a group only and drops a malformed one silently,
while the bot keeps every window the selected group states (inside all of
them: the reading that protects the site) and tells the operator which
line it could not read. Each line is still read by Protego, one at a time.

Pure functions of the lines and of a time (seconds since the epoch, UTC):
the robots.txt gate decides with them (:mod:`scrapy_walsh_research.gates.robots`).
"""

from __future__ import annotations

from dataclasses import dataclass

from protego import Protego

#: minutes in a day: a window's times are minutes since 00:00 UTC
DAY_MINUTES = 24 * 60
_PROBE = "walsh-research-visit-time"
#: Protego's spellings of the field
VISIT_TIME_FIELDS = frozenset({"visit-time", "visit time"})


@dataclass(frozen=True)
class VisitWindow:
    """One ``Visit-time`` window: from *start* (included) to *end*
    (excluded), minutes since 00:00 UTC; *end* before *start* wraps midnight."""

    start: int
    end: int

    @classmethod
    def read(cls, value: str) -> VisitWindow | None:
        """The window a ``Visit-time`` value states (``0400-0845``, or
        ``0400 0845``), read by Protego; None when it is malformed."""
        parser = Protego.parse(f"User-agent: {_PROBE}\nVisit-time: {value}\n")
        read = parser.visit_time(_PROBE)
        if read is None:
            return None
        start = read.start_time.hour * 60 + read.start_time.minute
        end = read.end_time.hour * 60 + read.end_time.minute
        return cls(start, end)

    def contains(self, minute: int) -> bool:
        """Whether *minute* (since 00:00 UTC) is inside the window. A window
        whose ends are equal is the whole day (``0000-0000``)."""
        if self.start == self.end:
            return True
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end  # wraps midnight

    def __str__(self) -> str:
        return f"{_hhmm(self.start)}-{_hhmm(self.end)}"


def _hhmm(minute: int) -> str:
    return f"{minute // 60:02d}{minute % 60:02d}"


def describe(windows: tuple[VisitWindow, ...]) -> str:
    """``0400-0845 UTC`` (several windows: each, joined by ``and``)."""
    return " and ".join(str(w) for w in windows) + " UTC"


def open_at(windows: tuple[VisitWindow, ...], t: float) -> bool:
    """Whether a visit at *t* (seconds since the epoch) is inside every window."""
    minute = int(t // 60) % DAY_MINUTES
    return all(w.contains(minute) for w in windows)


def next_opening(windows: tuple[VisitWindow, ...], t: float) -> float | None:
    """When the windows next open at or after *t*: *t* itself when they are
    open, the start of the first minute inside all of them, or None when
    no minute of the day is (windows that never overlap).

    A closed minute followed by an open one is some window's first minute,
    so only each window's next start is tried: asked for every queued target
    of a host whose window is closed, this stays a few comparisons."""
    if open_at(windows, t):
        return t
    day = int(t // 86400) * 86400
    starts = []
    for window in windows:
        at = day + window.start * 60
        # the minute *t* is in is closed: a start in it counts from tomorrow
        starts.append(at if at > t else at + 86400)
    for at in sorted(starts):
        if open_at(windows, at):
            return float(at)
    return None
