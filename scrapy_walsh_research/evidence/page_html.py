"""The evidence report's HTML pieces, shared by its sections: a time as the
page shows it, a rule code with its words, a table, the note on rows kept.

Every value from the log is escaped here or by the caller (paths and reasons
come from servers we do not trust).
"""

from __future__ import annotations

import html
import re
from typing import Any

from scrapy_walsh_research.evidence.glossary import RULES

esc = html.escape

_ISO = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d(?:\.\d+)?)(?:\+00:00|Z)")


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def when(ts: Any) -> str:
    """A time from the log as the page shows it (UTC, escaped):
    ``2026-11-28 05:16:07.776``; anything else as it is."""
    text = str(ts) if ts not in (None, "") else "—"
    found = _ISO.fullmatch(text)
    return esc(f"{found.group(1)} {found.group(2)}" if found else text)


def when_cell(ts: Any) -> str:
    """A table cell of a time, never wrapped (the ``when`` class)."""
    return f'<td class="when">{when(ts)}</td>'


def rule(code: str | None) -> str:
    """A rule code with its name, the code marked up with its meaning:
    ``your robots.txt (<abbr title="...">R2</abbr>)``."""
    if not code:
        return ""
    name, meaning = RULES.get(code, ("", ""))
    marked = f'<abbr title="{esc(meaning)}">{esc(code)}</abbr>'
    return f"{esc(name)} ({marked})" if name else marked


def kept(total: int, shown: int, what: str) -> str:
    """A note when a table shows only the latest of its rows (the counts
    above it cover them all)."""
    if shown >= total:
        return ""
    return (
        f'<p class="note rows-kept">The latest {shown:,} of {total:,} {esc(what)}; the counts '
        "above cover them all.</p>"
    )


def table(
    heads: list[str], rows: list[str], empty: str, table_id: str = "", n_cols: int = 0
) -> str:
    """*rows* under *heads* (the last *n_cols* right-aligned), or *empty*."""
    if not rows:
        return f'<p class="note">{esc(empty)}</p>'
    cells = "".join(
        f'<th class="n">{h}</th>' if i >= len(heads) - n_cols else f"<th>{h}</th>"
        for i, h in enumerate(heads)
    )
    opening = f'<table id="{table_id}">' if table_id else "<table>"
    return f"{opening}<thead><tr>{cells}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
