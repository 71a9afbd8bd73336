"""The evidence report: what the bot did to a host, from the audit log, as a
page a site owner can open and read without the contract (``scrapy
walsh-report``).

``--host HOST`` gives one page of what
:mod:`~scrapy_walsh_research.evidence.host_evidence` gathers for HOST and its
subdomains: the facts, what the page's words mean, a chart of the gaps
against the interval that applied (:mod:`.gap_chart`), and the tables of
requests, pages not fetched, the operator's own list lines, robots.txt,
waits for a document a failure left unknown, sitemaps, stated preferences,
the blocklist and purges. A code (R2, PREF, ``distress``) is shown with its
words, and every code the page uses is explained on it
(:mod:`.glossary`); a reason from the log is shown without the operator's
advice. A site owner sees the bot slow down when their server struggled.
Without ``--host``: a summary of every host linking to one page per host.

The page is static and self-contained: inline CSS and SVG, no script, no
external asset, every value from the log escaped (paths and reasons come
from servers we do not trust).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scrapy_walsh_research.core.contract import POLICY_URL, PRODUCT_TOKEN
from scrapy_walsh_research.evidence import glossary
from scrapy_walsh_research.evidence.document_sections import documents
from scrapy_walsh_research.evidence.gap_chart import chart
from scrapy_walsh_research.evidence.glossary import for_site_owner, kind_words, set_by_words
from scrapy_walsh_research.evidence.host_evidence import HostEvidence, Sent
from scrapy_walsh_research.evidence.page_html import (
    esc,
    kept,
    rule,
    seconds,
    table,
    when,
    when_cell,
)

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:72em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:2px 6px;border-bottom:1px solid #eee;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.when{white-space:nowrap;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,monospace;font-size:12px;word-break:break-all}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 1em}
dl.facts dt{color:#555}dl.facts dd{margin:0;font-weight:600}
dl.words dt{font-weight:600;margin-top:.4em}dl.words dd{margin:0 0 0 1.5em}
.under{background:#fdd}.ok{color:#070}.bad{color:#b00;font-weight:600}
.chart svg{width:100%;height:auto;max-width:1000px;background:#fafafa;border:1px solid #ddd}
.note{color:#555;font-size:12px}
abbr{text-decoration:underline dotted}
"""


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


# -- the top: who, the facts, the words ---------------------------------------------


def _intro(ev: HostEvidence, since: str | None) -> str:
    scope = f" since {esc(since)}" if since else ""
    return (
        f'<h1>What the Walsh-Research bot did on <span id="host">{esc(ev.host)}</span></h1>'
        "<p>Walsh-Research is a research crawler; its public policy is at "
        f"<code>{esc(POLICY_URL)}</code>. It fetches a list of pages its operator chose, reads "
        "only feeds and structured files, one request at a time, never two requests to a host "
        "less than a second apart. This page shows everything it did on "
        f"{esc(ev.host)} and its subdomains{scope}, from its audit log: each request was "
        "written down before it left. Times are UTC, as the sending machine's clock read "
        "them.</p><p class=\"note\">To slow the bot down, give it a Crawl-delay in your "
        f"robots.txt (<code>User-agent: {PRODUCT_TOKEN}</code>); to stop it, "
        "<code>Disallow: /</code> there, or ask its operator to add your site to the "
        "blocklist.</p>"
    )


def _facts(ev: HostEvidence) -> str:
    smallest, under = ev.smallest_gap, ev.under_count
    skipped = ev.not_fetched_count - ev.denied_count
    rows = [
        ("requests sent", f'<dd id="request-count">{ev.request_count}</dd>'),
        *_identity(ev),
        ("pages denied (a rule or your site said no)",
         f'<dd id="denied-count">{ev.denied_count}</dd>'),
        ("pages skipped or failed (not due yet, errors)", f'<dd id="skipped-count">{skipped}</dd>'),
        ("pages not fetched, by why", f'<dd id="not-fetched-count">{_by_why(ev) or 0}</dd>'),
    ]  # fmt: skip
    if ev.list_line_count:
        rows.append((
            "lines of the operator's own list not fetched (nothing your site did)",
            f'<dd id="list-line-count">{ev.list_line_count}</dd>',
        ))  # fmt: skip
    detail = (
        f' <span class="note">(before {esc(smallest.path)} at {when(smallest.ts)}, '
        f"required {seconds(smallest.required)})</span>"
        if smallest
        else ""
    )
    rows += [
        ("shortest gap between two requests",
         f'<dd id="smallest-gap">{seconds(smallest.gap if smallest else None)}{detail}</dd>'),
        ("gaps shorter than required",
         f'<dd id="under-count" class="{"bad" if under else "ok"}">{under}</dd>'),
    ]  # fmt: skip
    return '<dl class="facts">' + "".join(f"<dt>{esc(k)}</dt>{v}" for k, v in rows) + "</dl>"


def _identity(ev: HostEvidence) -> list[tuple[str, str]]:
    """Which User-Agent the requests sent and whether they were signed:
    said once when every request agrees (the table says it otherwise)."""
    if not ev.request_count:
        return []
    agents = [a for a in ev.user_agents if a]
    if len(ev.user_agents) == 1 and agents:
        agent = f'<dd id="user-agent"><code>{esc(agents[0])}</code> (every request)</dd>'
    else:
        agent = '<dd id="user-agent">not the same for every request: see each request</dd>'
    keys = list(ev.keyids)
    if keys == [""]:
        signed = '<dd id="keyid">no: the requests carried no signature</dd>'
    elif len(keys) == 1:
        signed = (f'<dd id="keyid">every request, key id <code>{esc(keys[0])}</code></dd>')
    else:
        signed = '<dd id="keyid">not the same for every request: see each request</dd>'
    return [("User-Agent sent", agent), ("signed (Web Bot Auth)", signed)]


def _by_why(ev: HostEvidence) -> str:
    """``denied, your robots.txt (R2): 1; skipped, not too often (R8): 4``."""
    parts = []
    for key, n in ev.not_fetched_by_outcome().items():
        outcome, _, code = key.partition(" (")
        code = code.rstrip(")")
        name = glossary.RULES.get(code, ("", ""))[0]
        parts.append(f"{outcome}, {name} ({code}): {n}" if name else f"{key}: {n}")
    return esc("; ".join(parts))


def _glossary(ev: HostEvidence, body: str) -> str:
    """What each code and term the page uses means: every rule code the
    page shows, the outcomes, kinds of request and causes of an interval
    its tables hold."""
    text = re.sub(r"<[^>]+>", " ", body)
    entries = [(f"{code}: {name}", meaning) for code, (name, meaning) in glossary.RULES.items()
               if re.search(rf"\b{code}\b", text)]  # fmt: skip
    outcomes = {key.partition(" (")[0] for key in ev.outcomes}
    entries += [(o, m) for o, m in glossary.OUTCOMES.items() if o in outcomes]
    kinds = {r.kind.partition(" ")[0] for r in ev.requests}
    entries += [(w, m) for k, (w, m) in glossary.KINDS.items() if k in kinds]
    set_by = {r.set_by or "floor" for r in ev.requests if r.gap is not None}
    entries += [(f"{w} ({k})", m) for k, (w, m) in glossary.SET_BY.items() if k in set_by]
    if ev.request_count:
        entries += list(glossary.IDENTITY.items())
    entries += [
        ("gap", "the time between a request and the one before it to the same host."),
        ("required (interval)", "the shortest gap the bot allowed itself before that request; "
         "a gap shorter than it is a fault of the bot, shown in red and counted above."),
    ]  # fmt: skip
    items = "".join(f"<dt>{esc(t)}</dt><dd>{esc(m[0].upper() + m[1:])}</dd>" for t, m in entries)
    return f'<h2>What the words on this page mean</h2><dl class="words" id="glossary">{items}</dl>'


# -- what was sent -------------------------------------------------------------------


def _timeline(ev: HostEvidence) -> str:
    by_exact: dict[str, list[Sent]] = {}
    for r in ev.requests:
        by_exact.setdefault(r.host, []).append(r)
    charts = (
        "".join(f"<h3>{esc(h)}</h3>{chart(rs)}" for h, rs in sorted(by_exact.items()))
        or '<p class="note">no request was sent</p>'
    )
    return f"<h2>Time between requests</h2>{charts}"


def _under(ev: HostEvidence) -> str:
    """Every request sent sooner after the previous one than required (the
    latest ROWS of them), apart from the request table, which lists only
    the latest requests."""
    if not ev.under_count:
        return ""
    rows = [
        f'<tr class="request under">{when_cell(r.ts)}<td>{esc(r.host)}</td>'
        f'<td class="mono">{esc(r.method)} {esc(r.path)}</td><td>{esc(set_by_words(r.set_by))}'
        f'</td><td class="n">{seconds(r.gap)}</td><td class="n">{seconds(r.required)}</td></tr>'
        for r in ev.under
    ]
    heads = ["time (UTC)", "host", "request", "required because of", "gap", "required"]
    return (
        "<h2>Gaps shorter than required</h2>"
        + kept(ev.under_count, len(ev.under), "requests under the interval")
        + table(heads, rows, "none", "under", n_cols=2)
    )


def _requests(ev: HostEvidence) -> str:
    hosts = len({r.host for r in ev.requests}) > 1
    agents, keyids = len(ev.user_agents) > 1, len(ev.keyids) > 1
    rows = []
    for r in ev.requests:
        answer = str(r.status) if r.status is not None else for_site_owner(r.error or "—")
        cells = [
            when_cell(r.ts),
            f"<td>{esc(r.host)}</td>" if hosts else "",
            f'<td class="mono">{esc(r.method)} {esc(r.path)}</td>',
            f"<td>{esc(kind_words(r.kind))}</td><td>{esc(answer)}</td>",
            f'<td class="n">{seconds(r.gap)}</td><td class="n">{seconds(r.required)}</td>',
            f'<td class="set-by">{esc(set_by_words(r.set_by)) if r.gap is not None else "—"}</td>',
            f'<td class="mono">{esc(r.user_agent or "—")}</td>' if agents else "",
            f'<td class="mono">{esc(r.keyid or "not signed")}</td>' if keyids else "",
        ]
        rows.append(f'<tr class="request{" under" if r.under else ""}">{"".join(cells)}</tr>')
    heads = ["time (UTC)", *(["host"] if hosts else []), "request", "what it was", "answer",
             "gap", "required", "required because of",
             *(["User-Agent"] if agents else []), *(["key id"] if keyids else [])]  # fmt: skip
    head = "".join(
        f'<th class="n">{h}</th>' if h in ("gap", "required") else f"<th>{h}</th>" for h in heads
    )
    return (
        "<h2>Requests</h2>"
        + kept(ev.request_count, len(ev.requests), "requests")
        + f'<table id="requests"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


# -- what was not sent ---------------------------------------------------------------


def _not_fetched(ev: HostEvidence) -> str:
    rows = [
        f'<tr class="{esc(str(d.get("outcome")))}">{when_cell(d.get("ts"))}'
        f'<td class="mono">{esc(str(d.get("url")))}</td><td>{esc(str(d.get("outcome")))}</td>'
        f"<td>{_why(d)}</td></tr>"
        for d in ev.not_fetched
    ]
    return (
        "<h2>Pages not fetched</h2><p class=\"note\">Denied: a rule or your site said no "
        "(robots.txt, the operator's blocklist, a usage preference). Skipped: not requested "
        "this time for the bot's own reasons (not due again yet; your host given time). "
        "Failed: requested, with no usable answer (an HTTP error such as 404, a network "
        "failure).</p>"
        + kept(ev.not_fetched_count, len(ev.not_fetched), "pages not fetched")
        + table(["time (UTC)", "page", "outcome", "why"], rows, "none", "not-fetched")
    )


def _why(d: dict[str, Any]) -> str:
    """The rule, in words, and the reason without the operator's advice."""
    code = rule(d.get("rule"))
    reason = esc(for_site_owner(str(d.get("reason") or "")))
    return f"{code}: {reason}" if code and reason else code or reason


def _list_lines(ev: HostEvidence) -> str:
    """The operator's own list lines that were not fetched (a line that
    repeats an earlier one): apart, since they say nothing of the site."""
    if not ev.list_line_count:
        return ""
    rows = [
        f'<tr class="{esc(str(d.get("outcome")))}">{when_cell(d.get("ts"))}'
        f'<td class="mono">{esc(str(d.get("url")))}</td>'
        f'<td>{esc(for_site_owner(str(d.get("reason") or d.get("outcome"))))}</td></tr>'
        for d in ev.list_lines
    ]
    return (
        "<h2>The operator's own list</h2><p>Lines of the bot's list that were not fetched "
        "because of the list itself (a page listed twice is fetched once): no request, and "
        "nothing your site did.</p>"
        + kept(ev.list_line_count, len(ev.list_lines), "list lines")
        + table(["time (UTC)", "page", "why"], rows, "none", "list-lines")
    )


def host_page(ev: HostEvidence, *, since: str | None = None) -> str:
    """One host's page, its sections in the order they appear; the words
    they use explained after the facts."""
    facts = _facts(ev)
    rest = (
        _under(ev) + _timeline(ev) + _requests(ev) + _not_fetched(ev) + _list_lines(ev)
        + documents(ev)
    )  # fmt: skip
    body = _intro(ev, since) + facts + _glossary(ev, facts + rest) + rest
    return _page(f"Walsh-Research evidence: {ev.host}", body)


# -- every host ----------------------------------------------------------------------


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
            f'<td class="n">{seconds(h.smallest_gap)}</td>'
            f'<td class="n">{h.under}</td></tr>'
        )
    scope = f" since {esc(since)}" if since else ""
    body = (
        f"<h1>Walsh-Research bot: evidence, all hosts{scope}</h1>"
        f'<dl class="facts"><dt>hosts</dt><dd id="host-count">{len(hosts)}</dd>'
        f'<dt>requests sent</dt><dd id="request-count">'
        f"{sum(h.requests for h in hosts.values())}</dd></dl>"
        '<p class="note">Per host: pages denied (a rule or the site said no), pages skipped or '
        "failed (not due yet, errors; a list line listed twice is not counted), the shortest "
        "gap between two requests, and the gaps shorter than required. Each host's page "
        "explains its codes.</p>"
        '<table id="hosts"><thead><tr><th>host</th><th class="n">requests</th>'
        '<th class="n">targets denied</th><th class="n">skipped or failed</th>'
        '<th class="n">smallest gap</th>'
        '<th class="n">under the interval</th></tr></thead><tbody>'
        + "".join(rows)
        + "</tbody></table>"
    )
    return _page("Walsh-Research evidence: all hosts", body)
