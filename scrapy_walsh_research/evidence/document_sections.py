"""The evidence report's sections on what the bot read before it asked for
a page, and what it deleted: robots.txt, the waits for a file a failure left
unknown, sitemaps, stated usage preferences, the operator's blocklist and
purges, each in a site owner's words (:mod:`.glossary`).
"""

from __future__ import annotations

from typing import Any

from scrapy_walsh_research.evidence.glossary import for_site_owner
from scrapy_walsh_research.evidence.host_evidence import HostEvidence
from scrapy_walsh_research.evidence.page_html import esc, table, when, when_cell
from scrapy_walsh_research.evidence.purge import in_words

WAIT_STATES = {
    "waiting": "could not be read: its pages wait for the next try",
    "known": "read again: its pages went on",
    "decided": "read again: its pages went on",
    "gave_up": "wait over: its pages were recorded, not requested",
}
SITEMAP_STATES = {
    "trusted": "checked: a page it said had not changed answered that it had not",
    "contradicted": "contradicted: a page it said had not changed had; not used for a while",
    "stale": "every change it claimed was no change: not read for a while",
    "ignored": "not used: it could not be fetched or read whole",
}
ROBOTS_HEADS = ["site", "fingerprint (sha256)", "first (UTC)", "last (UTC)", "requests"]
BLOCKLIST_HEADS = ["list updated (UTC)", "fingerprint (sha256)", "first (UTC)", "last (UTC)"]
SITEMAP_FACTS = {
    "fetched": "sitemap requests sent",
    "claims_checked": "claims checked against a page's own answer",
    "contradicted": "claims contradicted",
    "requests_saved": "pages not requested: the sitemap said they had not changed",
}


def documents(ev: HostEvidence) -> str:
    """The sections after the pages: robots.txt to purges."""
    return (
        _robots(ev) + _waits(ev) + _sitemaps(ev) + _preferences(ev) + _blocklist(ev)
        + _purges(ev)
    )  # fmt: skip


def _robots(ev: HostEvidence) -> str:
    rows = [
        f'<tr><td class="mono">{esc(v["origin"])}</td><td class="mono">{esc(v["sha256"])}</td>'
        f'{when_cell(v["first"])}{when_cell(v["last"])}<td class="n">{v["n"]}</td></tr>'
        for v in ev.robots_versions()
    ]
    fetches = "".join(
        f'<li><span class="when">{when(r.ts)}</span> {esc(r.url)}: '
        f"{esc(str(r.status) if r.status is not None else for_site_owner(r.error or '—'))}</li>"
        for r in ev.robots_fetches()
    )
    return (
        "<h2>Your robots.txt</h2><p>Each version of robots.txt the bot obeyed, told apart "
        "by its fingerprint (sha256 of the file: a new fingerprint, a changed file), with the "
        "first and last request it applied to.</p>"
        + table(ROBOTS_HEADS, rows, "none recorded", n_cols=1)
        + _robots_said(ev)
        + (f"<p>Requests for robots.txt:</p><ul>{fetches}</ul>" if fetches else "")
    )


def _robots_said(ev: HostEvidence) -> str:
    """What robots.txt said to the bot's operator: the windows it asked for
    (Visit-time, UTC), the lines it could not read, its Comment lines."""
    items = []
    for said in ev.robots_said.values():
        where = f'<span class="mono">{esc(str(said.get("url")))}</span>'
        windows = said.get("visit_time") or []
        if windows:
            items.append(
                f"<li>{where} asks for visits only within Visit-time "
                f"{esc(' and '.join(map(str, windows)))} UTC: the bot sent nothing but "
                "robots.txt outside it</li>"
            )
        for value in said.get("visit_time_unread") or []:
            items.append(
                f"<li>{where}: Visit-time {esc(str(value))} could not be read (HHMM-HHMM, "
                "UTC) and was ignored</li>"
            )
        for comment in said.get("comments") or []:
            items.append(f"<li>{where} Comment, relayed to the operator: {esc(str(comment))}</li>")
    if not items:
        return ""
    return f'<p>What it said to the bot\'s operator:</p><ul id="robots-said">{"".join(items)}</ul>'


def _waits(ev: HostEvidence) -> str:
    if not ev.waits:
        return ""
    heads = ["time (UTC)", "file", "what happened", "last answer", "tries", "next try (UTC)",
             "waits until (UTC)"]  # fmt: skip
    return (
        "<h2>Waiting for a file that could not be read</h2><p>A robots.txt, tdmrep.json or "
        "the operator's blocklist that could not be read (an error 5xx or 429, a timeout, a "
        "failed connection) is not taken as a yes: the bot sends nothing else to the host "
        "meanwhile, and the pages wait for the next try, up to a limit.</p>"
        + table(heads, [_wait_row(w) for w in ev.waits], "none", "waits")
    )


def _wait_row(w: dict[str, Any]) -> str:
    state = str(w.get("state"))
    answer, tries = w.get("answer"), w.get("tries")
    return (
        f'<tr class="wait">{when_cell(w.get("ts"))}<td class="mono">{esc(str(w.get("url")))}</td>'
        f"<td>{esc(WAIT_STATES.get(state, state))}</td>"
        f"<td>{esc(for_site_owner(str(answer))) if answer else '—'}</td>"
        f'<td class="n">{esc(str(tries)) if tries is not None else "—"}</td>'
        f'{when_cell(w.get("next_try"))}{when_cell(w.get("wait_until"))}</tr>'
    )


def _sitemaps(ev: HostEvidence) -> str:
    """The host's sitemaps section (empty when the bot used none)."""
    if not ev.sitemaps and not ev.sitemap_skips():
        return ""
    facts = "".join(
        f"<dt>{esc(SITEMAP_FACTS.get(k, k.replace('_', ' ')))}</dt><dd>{n}</dd>"
        for k, n in ev.sitemap_facts().items()
    )
    rows = [
        f'<tr class="sitemap">{when_cell(m.get("ts"))}<td class="mono">{esc(str(m.get("url")))}'
        f"</td><td>{esc(SITEMAP_STATES.get(str(m.get('state')), str(m.get('state'))))}</td>"
        f"<td>{_sitemap_detail(m)}</td></tr>"
        for m in ev.sitemaps
    ]
    return (
        "<h2>Your sitemaps</h2><p>On a later run, a page your sitemap says has not changed "
        "since the bot last fetched it is not requested, once one such page has been asked "
        "(conditionally) and confirmed it.</p>"
        f'<dl class="facts" id="sitemap-facts">{facts}</dl>'
        + table(["time (UTC)", "URL", "what happened", "detail"], rows, "none", "sitemaps")
    )


def _sitemap_detail(m: dict[str, Any]) -> str:
    """Why, or the sitemaps read (one per line, never a Python list)."""
    if m.get("why"):
        return esc(for_site_owner(str(m["why"])))
    maps = m.get("sitemaps")
    if isinstance(maps, (list, tuple)):
        return "<br>".join(f'<span class="mono">{esc(str(u))}</span>' for u in maps)
    return esc(str(maps)) if maps else ""


def _preferences(ev: HostEvidence) -> str:
    purposes = ev.purposes()
    rows = [
        f'<tr class="preference"><td>{esc(v["source"])}</td><td class="mono">{esc(v["signal"])}'
        f'</td><td class="mono">{esc(v["value"])}</td><td>{esc(v["scope"])}</td>'
        f"<td>{esc(', '.join(map(str, v['purposes'])) or '—')}</td>{when_cell(v['first'])}"
        f"<td>{_did(v['did'])}</td></tr>"
        for v in ev.stated_preferences()
    ]
    declared = (
        f'<p>The purposes the bot declares: <span id="purposes">{esc(", ".join(purposes))}</span> '
        "(tdm: text and data mining). A statement of yours that reserves a page against one of "
        "them means the page is not requested (robots.txt, tdmrep.json), or, stated in the "
        "page's own answer (a tdm-reservation header), that its content is not used: only its "
        "status and validators are kept.</p>"
        if purposes is not None
        else ""
    )
    heads = ["where you stated it", "signal", "value", "applies to", "purposes it names",
             "first seen (UTC)", "what the bot did"]  # fmt: skip
    return (
        "<h2>Your usage preferences</h2>" + declared
        + table(heads, rows, "none stated", "preferences")
    )  # fmt: skip


def _did(did: dict[str, int]) -> str:
    """``denied (PREF): 1``: what the bot did, how often (the codes are
    explained on the page)."""
    return esc("; ".join(f"{key}: {n}" for key, n in did.items()))


def _blocklist(ev: HostEvidence) -> str:
    rows = [
        f'<tr>{when_cell(v["updated"])}<td class="mono">{esc(v["sha256"])}</td>'
        f'{when_cell(v["first"])}{when_cell(v.get("last", ""))}</tr>'
        for v in ev.blocklist_versions()
    ]
    entries = "".join(f"<li><code>{esc(x)}</code></li>" for x in ev.blocklist_entries())
    return (
        "<h2>The operator's blocklist</h2><p>Sites that asked the operator not to be crawled "
        "are on a published list the bot reads before it sends anything; a site on it is sent "
        "nothing at all. Each version in force here, told apart by its fingerprint.</p>"
        + (f"<p>Entries that applied to your site:</p><ul>{entries}</ul>" if entries else "")
        + table(BLOCKLIST_HEADS, rows, "no list was in force")
    )


def _purges(ev: HostEvidence) -> str:
    if not ev.purges:
        return ""
    items = "".join(
        f'<li><span class="when">{when(p.get("ts"))}</span> {esc(str(p.get("host")))}: '
        f"{esc(for_site_owner(str(p.get('reason'))))}. Deleted: "
        f"{esc(in_words(p.get('deleted') or {}) or 'nothing was stored')}</li>"
        for p in ev.purges
    )
    return (
        "<h2>What the bot deleted about your site</h2><p>When your site opts out (the "
        "blocklist, robots.txt disallowing the bot for /), or the operator asks, what the bot "
        f"stored about it is deleted at once.</p><ul>{items}</ul>"
    )

