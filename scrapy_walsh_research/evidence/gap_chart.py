"""The evidence report's chart: the gap before each request to one host,
against the interval that applied, on a log scale.

A gap between two runs is minutes or days, a gap within a run about a second:
on a linear axis either the runs' gaps are cut off (a mark instead of a
value) or the seconds that matter vanish. On a log scale every gap is drawn
at its true height, 1 s and 1.5 s stay apart, and the longest gaps also
carry their value. Inline SVG, no script: the page stays self-contained.
"""

from __future__ import annotations

import html
import math
import re
from typing import TYPE_CHECKING

from scrapy_walsh_research.evidence.glossary import SET_BY, plain_duration, set_by_words

if TYPE_CHECKING:
    from scrapy_walsh_research.evidence.host_evidence import Sent

esc = html.escape

#: where the value axis may be labelled (seconds, label)
TICKS = (
    (0.01, "0.01 s"), (0.1, "0.1 s"), (0.5, "0.5 s"), (1, "1 s"), (2, "2 s"), (5, "5 s"),
    (10, "10 s"), (30, "30 s"), (60, "1 min"), (300, "5 min"), (900, "15 min"),
    (3600, "1 h"), (6 * 3600, "6 h"), (86400, "1 day"), (7 * 86400, "1 week"),
    (30 * 86400, "30 days"), (365 * 86400, "1 year"),
)  # fmt: skip
WIDTH, HEIGHT = 1000, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 22, 40
#: a gap this many times its interval is labelled with its value (a pause,
#: a gap between runs), as many as fit
LONG = 10.0
#: the tick colour of each thing that can set a host's interval
SET_BY_COLOURS = {
    "floor": "#000",
    "Crawl-delay": "#555",
    "load": "#d80",
    "distress": "#a0a",
    "Retry-After": "#06c",
    "backoff": "#39c",
}
OK_COLOUR, UNDER_COLOUR = "#4a8", "#c00"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class _Scale:
    """The value axis: log10, from a tick below the smallest value to one
    above the largest, a decade at least."""

    def __init__(self, values: list[float]) -> None:
        positive = [v for v in values if v > 0] or [1.0]
        small, large = min(positive), max(positive)
        below = [t for t, _ in TICKS if t <= small * 0.9]
        self.lo = below[-1] if below else small / 2
        above = [t for t, _ in TICKS if t >= max(large * 1.1, self.lo * 10)]
        self.hi = above[0] if above else large * 1.5
        self.span = math.log10(self.hi) - math.log10(self.lo)

    def y(self, value: float) -> float:
        """The height (SVG y) of *value*; zero or below the axis: its foot."""
        v = max(value, self.lo)
        share = (math.log10(v) - math.log10(self.lo)) / self.span
        return TOP + (HEIGHT - TOP - BOTTOM) * (1 - share)

    def ticks(self) -> list[tuple[float, str]]:
        shown: list[tuple[float, str]] = []
        for t, label in TICKS:
            if self.lo <= t <= self.hi and (not shown or self.y(shown[-1][0]) - self.y(t) >= 14):
                shown.append((t, label))
        return shown


def chart(requests: list[Sent]) -> str:
    """Gaps between consecutive requests to one host, in request order: a bar
    per gap (red when under the interval), a tick at the interval that
    applied (coloured by what set it), the long gaps labelled."""
    gaps = [r for r in requests if r.gap is not None]
    if not gaps:
        return '<p class="note">fewer than two requests: no gap to show</p>'
    scale = _Scale([r.gap or 0.0 for r in gaps] + [r.required or 0.0 for r in gaps])
    foot = scale.y(0.0)
    plot = WIDTH - LEFT - RIGHT
    step = plot / len(gaps)
    bar = min(max(1.0, step * 0.7), 28.0)
    parts = [
        f'<svg class="gaps" role="img" aria-label="gaps between requests to '
        f'{esc(requests[0].host)}, log scale" viewBox="0 0 {WIDTH} {HEIGHT}" '
        'xmlns="http://www.w3.org/2000/svg">',
        *_axis(scale, foot),
    ]
    steps, labels, head = [], _labelled(gaps, plot), len(parts)
    for i, r in enumerate(gaps):
        x = LEFT + i * step + (step - bar) / 2
        gap, required, by = r.gap or 0.0, r.required or 0.0, r.set_by or "floor"
        top = min(scale.y(gap), foot - 2)  # a gap of 0 still shows
        words = f"{set_by_words(by)} ({by})"
        parts.append(
            f'<rect class="gap{" under" if r.under else ""}" data-gap="{gap:.3f}" '
            f'data-interval="{required:.3f}" x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
            f'height="{foot - top:.1f}" fill="{UNDER_COLOUR if r.under else OK_COLOUR}">'
            f"<title>{esc(r.ts)} {esc(r.path)}: gap {gap:.3f} s, interval {required:.3f} s, "
            f"set by {esc(words)}</title></rect>"
        )
        tick = scale.y(required)
        steps.append(f"{x - 1:.1f},{tick:.1f} {x + bar + 1:.1f},{tick:.1f}")
        parts.append(
            f'<line class="interval {slug(by)}" x1="{x - 1:.1f}" y1="{tick:.1f}" '
            f'x2="{x + bar + 1:.1f}" y2="{tick:.1f}" stroke="{SET_BY_COLOURS.get(by, "#000")}" '
            'stroke-width="2.5"/>'
        )
        if i in labels:
            parts.append(
                f'<text class="value" x="{x + bar / 2:.1f}" y="{top - 4:.1f}" font-size="11" '
                f'text-anchor="middle">{esc(plain_duration(gap))}</text>'
            )
    # the interval as one line across the bars: where it rises, the bot slowed down
    parts.insert(
        head,
        f'<polyline class="interval-line" points="{" ".join(steps)}" fill="none" '
        'stroke="#888" stroke-width="1" stroke-dasharray="3,2"/>',
    )
    parts += _ends(gaps), "</svg>"
    return '<div class="chart">' + "".join(parts) + "</div>" + _legend(gaps)


def _axis(scale: _Scale, foot: float) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{foot:.1f}" x2="{WIDTH - RIGHT}" y2="{foot:.1f}" '
           'stroke="#999"/>']  # fmt: skip
    for t, label in scale.ticks():
        y = scale.y(t)
        out.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e4e4e4"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" '
            f'text-anchor="end">{esc(label)}</text>'
        )
    return out


def _ends(gaps: list[Sent]) -> str:
    """The time of the first and last request drawn, under the axis."""
    y = HEIGHT - BOTTOM + 16
    first, last = (esc(_short(r.ts)) for r in (gaps[0], gaps[-1]))
    return (
        f'<text x="{LEFT}" y="{y}" font-size="11">{first}</text>'
        f'<text x="{WIDTH - RIGHT}" y="{y}" font-size="11" text-anchor="end">{last}</text>'
        f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.0f}" y="{y + 14}" font-size="11" '
        'text-anchor="middle" fill="#555">requests in the order sent (UTC)</text>'
    )


def _short(ts: str) -> str:
    found = re.match(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)", ts)
    return f"{found.group(1)} {found.group(2)}" if found else ts


def _labelled(gaps: list[Sent], plot: float) -> set[int]:
    """The bars labelled with their value: those under the interval, then
    the longest of those at least :data:`LONG` times their interval, as
    many as fit side by side."""
    room = max(1, int(plot // 64))
    under = [i for i, r in enumerate(gaps) if r.under]
    long_ = sorted(
        (i for i, r in enumerate(gaps)
         if not r.under and (r.gap or 0.0) >= LONG * max(r.required or 1.0, 0.001)),
        key=lambda i: -(gaps[i].gap or 0.0),
    )  # fmt: skip
    chosen = (under + long_)[:room]
    step = plot / len(gaps)
    if step >= 60:
        return set(chosen)
    # narrow bars: keep labels at least 64 px apart
    kept: list[int] = []
    for i in chosen:
        if all(abs(i - j) * step >= 64 for j in kept):
            kept.append(i)
    return set(kept)


def _legend(gaps: list[Sent]) -> str:
    used = {r.set_by or "floor" for r in gaps}
    keys = "; ".join(
        f'<span style="color:{c}">■</span> {esc(SET_BY[k][0])}'
        for k, c in SET_BY_COLOURS.items()
        if k in used
    )
    return (
        '<p class="note">Log scale: each step up the axis is a longer wait, so a gap of '
        "1 s and one of several days both show at their true height. Each bar is the time "
        "between one request to this host and the one before it (green: no shorter than "
        f'required; <span style="color:{UNDER_COLOUR}">red</span>: shorter, a fault of '
        "the bot); the tick across it is the shortest gap that was required then, "
        f"coloured by what set it ({keys}), and the dashed line joins the ticks: where it "
        "rises, the bot slowed down. Long gaps are labelled with their length.</p>"
    )
