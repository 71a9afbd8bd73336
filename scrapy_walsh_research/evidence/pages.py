"""The evidence report: what the bot did to a host, from the audit log, as a
page a site owner can open (``scrapy walsh-report``).

``--host HOST`` gives one page of what
:mod:`~scrapy_walsh_research.evidence.host_evidence` gathers for HOST and its
subdomains: the facts, a chart of the gaps against the interval that applied,
and the tables of requests, targets not fetched, robots.txt, blocklist versions,
waits for a document a failure left unknown, sitemaps, stated preferences and purges.
A site owner sees the bot slow down when their server struggled. Without
``--host``: a summary of every host linking to one page per host.

The page is static and self-contained: inline CSS and SVG, no script, no
external asset, every value from the log escaped (paths and reasons come
from servers we do not trust).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_walsh_research.evidence.host_evidence import HostEvidence, Sent

esc = html.escape

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:72em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:2px 6px;border-bottom:1px solid #eee;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,.mono{font-family:ui-monospace,monospace;font-size:12px;word-break:break-all}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 1em}
dl.facts dt{color:#555}dl.facts dd{margin:0;font-weight:600}
.under{background:#fdd}.ok{color:#070}.bad{color:#b00;font-weight:600}
svg{background:#fafafa;border:1px solid #ddd}
.note{color:#555;font-size:12px}
"""


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


def _chart(requests: list[Sent]) -> str:
    """Gaps between consecutive requests to one host, in request order: a bar
    per gap (red when under the interval) and a tick at the interval that
    applied. Gaps longer than the chart (between runs) are cut with a mark."""
    gaps = [r for r in requests if r.gap is not None]
    if not gaps:
        return '<p class="note">fewer than two requests: no gap to show</p>'
    top = max(3.0 * max(r.required or 1.0 for r in gaps), 2.0)
    width, height, pad = max(320, min(1100, 8 * len(gaps) + 60)), 180, 40
    step = (width - pad - 10) / len(gaps)
    bar = max(1.0, step * 0.7)

    def y(v: float) -> float:
        return height - 20 - (min(v, top) / top) * (height - 40)

    parts = [
        f'<svg role="img" aria-label="gaps between requests to {esc(requests[0].host)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{pad}" y1="{y(0)}" x2="{width - 5}" y2="{y(0)}" stroke="#999"/>',
        f'<text x="4" y="{y(top) + 4:.1f}" font-size="10">{top:.1f} s</text>',
        f'<text x="4" y="{y(0) + 4:.1f}" font-size="10">0 s</text>',
    ]
    steps = []
    for i, r in enumerate(gaps):
        x = pad + i * step
        colour = "#c00" if r.under else "#4a8"
        gap = r.gap or 0.0
        by = r.set_by or "floor"
        parts.append(
            f'<rect class="gap{" under" if r.under else ""}" x="{x:.1f}" y="{y(gap):.1f}" '
            f'width="{bar:.1f}" height="{y(0) - y(gap):.1f}" fill="{colour}">'
            f"<title>{esc(r.ts)} {esc(r.path)}: gap {gap:.3f} s, interval "
            f"{(r.required or 0):.3f} s (set by {esc(by)})</title></rect>"
        )
        req = y(r.required or 0.0)
        steps.append(f"{x - 1:.1f},{req:.1f} {x + bar + 1:.1f},{req:.1f}")
        parts.append(
            f'<line class="interval {_slug(by)}" x1="{x - 1:.1f}" y1="{req:.1f}" '
            f'x2="{x + bar + 1:.1f}" y2="{req:.1f}" stroke="{SET_BY_COLOURS.get(by, "#000")}" '
            'stroke-width="2.5"/>'
        )
        if gap > top:
            parts.append(f'<text x="{x:.1f}" y="{y(top) - 2:.1f}" font-size="9">▲</text>')
    # the interval as one line across the bars: where it rises, the bot slowed down
    parts.insert(
        4,
        f'<polyline class="interval-line" points="{" ".join(steps)}" fill="none" '
        'stroke="#888" stroke-width="1" stroke-dasharray="3,2"/>',
    )
    parts.append("</svg>")
    keys = ", ".join(
        f'<span style="color:{c}">■</span> {esc(k)}' for k, c in SET_BY_COLOURS.items()
    )
    legend = (
        '<p class="note">Bars: the gap before each request (to the same host), in request '
        "order; tick and dashed line: the interval that applied, coloured by what set it "
        f"({keys}): the floor (1 s), the Crawl-delay, the host's load (a multiple of its "
        "response time), its distress (errors, timeouts), or a Retry-After or backoff hold; "
        "red bar: under it; ▲: longer than the chart.</p>"
    )
    return "".join(parts) + legend


#: the tick colour of each thing that can set a host's interval
SET_BY_COLOURS = {
    "floor": "#000",
    "Crawl-delay": "#555",
    "load": "#d80",
    "distress": "#a0a",
    "Retry-After": "#06c",
    "backoff": "#39c",
}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _facts(ev: HostEvidence) -> str:
    smallest = ev.smallest_gap
    under = ev.under_count
    return (
        '<dl class="facts">'
        f'<dt>requests sent</dt><dd id="request-count">{ev.request_count}</dd>'
        f'<dt>targets denied (a rule or the site said no)</dt>'
        f'<dd id="denied-count">{ev.denied_count}</dd>'
        f'<dt>targets not fetched, by outcome</dt><dd id="not-fetched-count">'
        f"{esc(_counts(ev)) or 0}</dd>"
        f'<dt>smallest gap</dt><dd id="smallest-gap">{_seconds(smallest.gap if smallest else None)}'
        + (
            f' <span class="note">(before {esc(smallest.path)} at {esc(smallest.ts)}, interval '
            f"{_seconds(smallest.required)})</span>"
            if smallest
            else ""
        )
        + "</dd>"
        f'<dt>gaps under the interval</dt><dd id="under-count" '
        f'class="{"bad" if under else "ok"}">{under}</dd>'
        "</dl>"
    )


def _under(ev: HostEvidence) -> str:
    """Every request sent sooner after the previous one than the interval
    that applied (the latest ROWS of them), apart from the request table,
    which lists only the latest requests."""
    if not ev.under_count:
        return ""
    rows = [
        f'<tr class="request under"><td class="mono">{esc(r.ts)}</td><td>{esc(r.host)}</td>'
        f'<td class="mono">{esc(r.method)} {esc(r.path)}</td><td>{esc(r.set_by or "—")}</td>'
        f'<td class="n">{_seconds(r.gap)}</td><td class="n">{_seconds(r.required)}</td></tr>'
        for r in ev.under
    ]
    heads = ["time (UTC)", "host", "request", "interval set by", "gap", "interval"]
    return (
        "<h2>Gaps under the interval</h2>"
        + _kept(ev.under_count, len(ev.under), "requests under the interval")
        + _table(heads, rows, "none", "under", n_cols=2)
    )


def _kept(total: int, shown: int, what: str) -> str:
    """A note when a table shows only the latest of its rows (the counts
    above it cover them all)."""
    if shown >= total:
        return ""
    return (
        f'<p class="note rows-kept">The latest {shown:,} of {total:,} {esc(what)}; the counts '
        "above cover them all (scrapy walsh-report --since narrows the period).</p>"
    )


def _counts(ev: HostEvidence) -> str:
    return ", ".join(f"{k} {n}" for k, n in ev.not_fetched_by_outcome().items())


def _table(
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


NOT_FETCHED_HEADS = ["time (UTC)", "target", "outcome", "rule", "reason"]
PREFERENCE_HEADS = ["source", "signal", "value", "scope", "speaks about", "first seen (UTC)",
                    "what the bot did"]  # fmt: skip
WAIT_HEADS = ["time (UTC)", "document", "what happened", "last answer", "tries", "next try",
              "waits until"]  # fmt: skip
WAIT_STATES = {
    "waiting": "unknown: targets wait for the next try",
    "known": "read again: the targets went on",
    "gave_up": "wait over: targets recorded, not requested",
}


def _wait_row(wait: dict[str, Any]) -> str:
    """One entry of a document's wait: when, which, what happened, the tries."""
    state = str(wait.get("state"))
    cells = [wait.get("ts"), wait.get("url"), WAIT_STATES.get(state, state), wait.get("answer"),
             wait.get("tries"), wait.get("next_try"), wait.get("wait_until")]  # fmt: skip
    text = [esc(str(c)) if c not in (None, "") else "—" for c in cells]
    return (
        f'<tr class="wait"><td class="mono">{text[0]}</td><td class="mono">{text[1]}</td>'
        f'<td>{text[2]}</td><td>{text[3]}</td><td class="n">{text[4]}</td>'
        f'<td class="mono">{text[5]}</td><td class="mono">{text[6]}</td></tr>'
    )


SITEMAP_STATES = {
    "trusted": "claim checked: the target answered 304 or the same validators",
    "contradicted": "claim contradicted: new validators; sitemap not used for a while",
    "stale": "every claim of change answered 304: not fetched for a while",
    "ignored": "not used: not fetched or not read whole",
}


def _sitemaps(ev: HostEvidence) -> str:
    """The host's sitemaps section (empty when the bot used none)."""
    if not ev.sitemaps and not ev.sitemap_skips():
        return ""
    facts = ev.sitemap_facts()
    rows = [
        f'<tr class="sitemap"><td class="mono">{esc(str(m.get("ts")))}</td>'
        f'<td class="mono">{esc(str(m.get("url")))}</td>'
        f"<td>{esc(SITEMAP_STATES.get(str(m.get('state')), str(m.get('state'))))}</td>"
        f"<td>{esc(str(m.get('why') or m.get('sitemaps') or ''))}</td></tr>"
        for m in ev.sitemaps
    ]
    return (
        "<h2>Sitemaps</h2><p>On a re-run, a target the host's sitemap says has not changed "
        "since the bot's last answer from it is not requested, once the sitemap has been "
        "checked in that run: one such target is sent as a conditional GET first.</p>"
        '<dl class="facts" id="sitemap-facts">'
        + "".join(f"<dt>{esc(k.replace('_', ' '))}</dt><dd>{n}</dd>" for k, n in facts.items())
        + "</dl>"
        + _table(["time (UTC)", "URL", "what happened", "detail"], rows, "no verdict", "sitemaps")
    )


def host_page(ev: HostEvidence, *, since: str | None = None) -> str:
    """One host's page. Long because it writes the page's sections in the
    order they appear (requests, targets not fetched, documents, preferences,
    purges): read top to bottom."""
    rows = []
    for r in ev.requests:
        answer = str(r.status) if r.status is not None else (r.error or "—")
        rows.append(
            f'<tr class="request{" under" if r.under else ""}"><td class="mono">{esc(r.ts)}</td>'
            f'<td>{esc(r.host)}</td><td class="mono">{esc(r.method)} {esc(r.path)}</td>'
            f"<td>{esc(r.kind)}</td><td>{esc(answer)}</td>"
            f'<td class="n">{_seconds(r.gap)}</td><td class="n">{_seconds(r.required)}</td>'
            f'<td class="set-by">{esc(r.set_by or "—") if r.gap is not None else "—"}</td>'
            f'<td class="mono">{esc(r.user_agent or "—")}</td>'
            f'<td class="mono">{esc(r.keyid or "unsigned")}</td></tr>'
        )
    not_fetched = [
        f'<tr class="{esc(str(d.get("outcome")))}"><td class="mono">{esc(str(d.get("ts")))}</td>'
        f'<td class="mono">{esc(str(d.get("url")))}</td><td>{esc(str(d.get("outcome")))}</td>'
        f"<td>{esc(str(d.get('rule') or ''))}</td><td>{esc(str(d.get('reason') or ''))}</td></tr>"
        for d in ev.not_fetched
    ]
    robots = [
        f'<tr><td class="mono">{esc(v["origin"])}</td><td class="mono">{esc(v["sha256"])}</td>'
        f'<td class="mono">{esc(v["first"])}</td><td class="mono">{esc(v["last"])}</td>'
        f'<td class="n">{v["n"]}</td></tr>'
        for v in ev.robots_versions()
    ]
    fetches = [
        f'<li><span class="mono">{esc(r.ts)}</span> {esc(r.url)}: '
        f"{esc(str(r.status) if r.status is not None else (r.error or '—'))}</li>"
        for r in ev.robots_fetches()
    ]
    blocklists = [
        f'<tr><td>{esc(str(v["updated"]))}</td><td class="mono">{esc(v["sha256"])}</td>'
        f'<td class="mono">{esc(v["first"])}</td>'
        f'<td class="mono">{esc(v.get("last", ""))}</td></tr>'
        for v in ev.blocklist_versions()
    ]
    entries = "".join(f"<li><code>{esc(x)}</code></li>" for x in ev.blocklist_entries())
    stated = [
        f'<tr class="preference"><td>{esc(v["source"])}</td><td class="mono">{esc(v["signal"])}'
        f'</td><td class="mono">{esc(v["value"])}</td><td>{esc(v["scope"])}</td>'
        f"<td>{esc(', '.join(map(str, v['purposes'])) or '—')}</td>"
        f'<td class="mono">{esc(str(v["first"]))}</td>'
        f"<td>{esc(', '.join(f'{k}: {n}' for k, n in v['did'].items()))}</td></tr>"
        for v in ev.stated_preferences()
    ]
    waits = [_wait_row(w) for w in ev.waits]
    purposes = ev.purposes()
    purges = "".join(
        f'<li><span class="mono">{esc(str(p.get("ts")))}</span> {esc(str(p.get("host")))}: '
        f"{esc(str(p.get('reason')))} — deleted {esc(json.dumps(p.get('deleted')))}</li>"
        for p in ev.purges
    )
    by_exact: dict[str, list[Sent]] = {}
    for r in ev.requests:
        by_exact.setdefault(r.host, []).append(r)
    charts = (
        "".join(f"<h3>{esc(h)}</h3>{_chart(rs)}" for h, rs in sorted(by_exact.items()))
        or '<p class="note">no request was sent</p>'
    )
    scope = f" since {esc(since)}" if since else ""
    body = (
        f'<h1>Walsh-Research bot: evidence for <span id="host">{esc(ev.host)}</span></h1>'
        f'<p class="note">From the bot\'s audit log{scope}, written before each request left. '
        "Times are UTC (wall clock of the machine that sent).</p>"
        f"{_facts(ev)}{_under(ev)}<h2>Timeline</h2>{charts}"
        "<h2>Requests</h2>"
        + _kept(ev.request_count, len(ev.requests), "requests")
        + '<table id="requests"><thead><tr><th>time (UTC)</th><th>host</th>'
        '<th>request</th><th>kind</th><th>answer</th><th class="n">gap</th>'
        '<th class="n">interval</th><th>set by</th><th>User-Agent</th><th>keyid</th></tr>'
        "</thead><tbody>"
        + "".join(rows)
        + "</tbody></table><h2>Targets not fetched</h2><p class=\"note\">Denied (a rule or the "
        "site said no: robots.txt, the operator blocklist, a usage preference), skipped (not "
        "due, R8; the host held or given up, R4/R5; a duplicate line) or failed (an HTTP "
        "error such as 404, a network failure).</p>"
        + _kept(ev.not_fetched_count, len(ev.not_fetched), "targets not fetched")
        + _table(NOT_FETCHED_HEADS, not_fetched, "none", "not-fetched")
        + "<h2>robots.txt</h2><p>Versions in force (by sha256 of the file):</p>"
        + _table(
            ["origin", "sha256", "first", "last", "requests"], robots, "none recorded", n_cols=1
        )
        + (f"<p>Fetches:</p><ul>{''.join(fetches)}</ul>" if fetches else "")
        + (
            "<h2>Waits</h2><p>A robots.txt, tdmrep.json or blocklist that could not be read "
            "(5xx, 429, a timeout, a connection failure) is unknown, not a verdict: nothing is "
            "sent to the host meanwhile, and its targets wait for the next try, up to a bound "
            "(WALSH_POLICY_WAIT).</p>"
            + _table(WAIT_HEADS, waits, "none", "waits")
            if waits
            else ""
        )
        + _sitemaps(ev)
        + "<h2>Stated usage preferences</h2>"
        + (
            f'<p>Purposes the bot declared: <span id="purposes">{esc(", ".join(purposes))}</span>. '
            "A statement that says no to one of them denies the target before the request "
            "(robots.txt, tdmrep.json) or withholds it after (response headers: status and "
            "validators kept, nothing read).</p>"
            if purposes is not None
            else ""
        )
        + _table(PREFERENCE_HEADS, stated, "none stated", "preferences")
        + "<h2>Operator blocklist</h2>"
        + (f"<p>Entries that applied:</p><ul>{entries}</ul>" if entries else "")
        + _table(["updated", "sha256", "first", "last"], blocklists, "no list was in force")
        + (f"<h2>Purges</h2><ul>{purges}</ul>" if purges else "")
    )
    return _page(f"Walsh-Research evidence: {ev.host}", body)


def host_file(host: str) -> str:
    """A file name for *host*'s page (a host name is already file-safe,
    an IPv6 literal is not)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host) + ".html"


@dataclass(frozen=True)
class HostSummary:
    """One host's line on the summary page: what is left of its evidence
    once its own page is written (the summary of 10^5 hosts holds no rows)."""

    requests: int
    denied: int
    skipped_or_failed: int
    smallest_gap: float | None
    under: int

    @classmethod
    def of(cls, ev: HostEvidence) -> HostSummary:
        smallest = ev.smallest_gap
        return cls(
            requests=ev.request_count,
            denied=ev.denied_count,
            skipped_or_failed=ev.not_fetched_count - ev.denied_count,
            smallest_gap=smallest.gap if smallest else None,
            under=ev.under_count,
        )


def summary_page(
    hosts: Mapping[str, HostSummary], link_dir: str, *, since: str | None = None
) -> str:
    rows = []
    for host, h in hosts.items():
        rows.append(
            f'<tr class="host{" under" if h.under else ""}">'
            f'<td><a href="{esc(link_dir)}/{esc(host_file(host))}">{esc(host)}</a></td>'
            f'<td class="n">{h.requests}</td><td class="n">{h.denied}</td>'
            f'<td class="n">{h.skipped_or_failed}</td>'
            f'<td class="n">{_seconds(h.smallest_gap)}</td>'
            f'<td class="n">{h.under}</td></tr>'
        )
    scope = f" since {esc(since)}" if since else ""
    body = (
        f"<h1>Walsh-Research bot: evidence, all hosts{scope}</h1>"
        f'<dl class="facts"><dt>hosts</dt><dd id="host-count">{len(hosts)}</dd>'
        f'<dt>requests sent</dt><dd id="request-count">'
        f"{sum(h.requests for h in hosts.values())}</dd></dl>"
        '<table id="hosts"><thead><tr><th>host</th><th class="n">requests</th>'
        '<th class="n">targets denied</th><th class="n">skipped or failed</th>'
        '<th class="n">smallest gap</th>'
        '<th class="n">under the interval</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )
    return _page("Walsh-Research evidence: all hosts", body)
