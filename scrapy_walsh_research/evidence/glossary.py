"""The evidence report's words: what each code and term on the page means to
a site owner who has never read the contract, and the log's reasons with the
operator's advice taken out.

The audit log speaks operator (rule codes, ``tdmrep``, ``set by distress``,
``WALSH_RUN_INTERVAL=0``): right for the operator's log, wrong for the page
sent to a site owner. :mod:`scrapy_walsh_research.evidence.pages` shows a
code with its words, explains every code the page uses in one section, and
shows a reason through :func:`for_site_owner`. Written by hand: the words
are this contract's.
"""

from __future__ import annotations

import re

from scrapy_walsh_research.core.contract import SIGNATURE_AGENT

#: rule code -> (its name, what it means), as a site owner reads them
RULES: dict[str, tuple[str, str]] = {
    "R1": ("the bot's name", "every request names the bot in its User-Agent header, exactly as "
           "this page shows it, so your logs and robots.txt can tell it apart."),
    "R2": ("your robots.txt", "the bot reads /robots.txt before anything else on a host and "
           "obeys the group that names Walsh-Research (or the * group when none does): a path "
           "it disallows is not requested."),
    "R3": ("the operator's blocklist", "sites that asked the operator (by email) not to be "
           "crawled are on a published list; the bot sends them nothing at all, not even a "
           "request for robots.txt."),
    "R4": ("pacing", "one request at a time, and never two requests to a host less than 1 "
           "second apart, or your Crawl-delay apart when it is longer; a host whose "
           "Crawl-delay is very long is left out."),
    "R5": ("backing off", "after a 429 or 503 answer, or a failed connection, the bot waits "
           "before trying again, longer each time and at least as long as your Retry-After "
           "asks, and gives up after a few tries."),
    "R6": ("only what was listed", "the bot fetches the pages on its list and nothing else: it "
           "follows no links and downloads no images, scripts or stylesheets."),
    "R7": ("not fetching what did not change", "the bot asks whether a page changed since it "
           "last saw it (If-None-Match, If-Modified-Since); a page your sitemap says has not "
           "changed since then is not requested at all."),
    "R8": ("not too often", "the bot fetches each page at most once per run interval (a day "
           "unless its operator sets another): a page fetched more recently is not requested "
           "again."),
    "R9": ("structured formats only", "the bot reads feeds, markdown and llms.txt, and never "
           "extracts content from HTML."),
    "PREF": ("your usage preferences", "what your site states about how its content may be "
             "used (a TDMRep file, /.well-known/tdmrep.json; tdm-reservation headers; usage "
             "lines in robots.txt): a page reserved against a purpose the bot declares is not "
             "requested, or its answer is not used."),
}

#: a target's outcome -> what it means (the outcomes of targets not fetched)
OUTCOMES: dict[str, str] = {
    "denied": "not requested: a rule or your site said no (robots.txt, the operator's "
              "blocklist, a usage preference).",
    "withheld": "requested, but your answer said its content may not be used: only its "
                "status and validators were kept.",
    "skipped": "not requested this time, for the bot's own reasons: not due again yet, or "
               "your host was being given time (a long Crawl-delay, a Retry-After).",
    "failed": "requested, with no usable answer: an HTTP error such as 404, or a network "
              "failure.",
}

#: what a request was for (the audit log's ``kind``) -> (words, what it is)
KINDS: dict[str, tuple[str, str]] = {
    "target": ("a listed page", "a page on the bot's list of targets."),
    "robots": ("robots.txt", "your /robots.txt, read before any page of the host and at most "
               "once a day."),
    "tdmrep": ("tdmrep.json", "/.well-known/tdmrep.json, where a site may reserve its content "
               "against text and data mining (TDMRep); read once per host, before its pages."),
    "llms": ("llms.txt", "/llms.txt, a plain index of a site's main pages for automated "
             "readers (llmstxt.org); asked for once per host and run when a page offered no "
             "feed or markdown, instead of reading its HTML."),
    "sitemap": ("sitemap", "a sitemap your robots.txt names; read on a re-run to leave out the "
                "pages it says have not changed."),
    "blocklist": ("the operator's blocklist", "the list of sites that opted out by email, "
                  "which the bot reads from its operator."),
    "schema": ("the blocklist's schema", "the description the blocklist is checked against."),
}

#: what set the interval before a request -> (words, what it means)
SET_BY: dict[str, tuple[str, str]] = {
    "floor": ("the 1 s minimum", "the bot's minimum: 1 second between two requests to a host."),
    "Crawl-delay": ("your Crawl-delay", "the Crawl-delay (or Request-rate) of your robots.txt."),
    "load": ("your server's response time", "your server answered slowly, so the bot spaced "
             "its requests further apart (six times the response time, at most 60 s)."),
    "distress": ("your server's errors", "your server answered with errors (5xx, 429, 408) or "
                 "did not answer in time, so the bot slowed down, three times more after each, "
                 "until it answered well again."),
    "Retry-After": ("your Retry-After", "your server asked the bot to wait (Retry-After, with a "
                    "429 or 503), and it sent nothing to the host for that long."),
    "backoff": ("backing off", "after an error that named no wait, the bot waited a growing, "
                "random time before trying again."),
}

#: the identity every request carries -> what it means
IDENTITY: dict[str, str] = {
    "User-Agent": "the header that names the bot in every request; your robots.txt "
    "speaks to it as Walsh-Research.",
    "signed (Web Bot Auth)": "a signed request carries a signature made with the bot's "
    "key (HTTP Message Signatures), so your server can check it came from this bot; the "
    f"key id names the key, published at {SIGNATURE_AGENT}.",
}

#: the operator's settings a reason may name -> what they are, in words
SETTINGS: dict[str, str] = {
    "WALSH_RUN_INTERVAL": "the bot's run interval",
    "WALSH_POLICY_WAIT": "the longest the bot waits for a policy file",
    "WALSH_RETRY_MAX_DELAY": "the longest wait the bot accepts",
    "WALSH_MAX_CRAWL_DELAY": "the longest Crawl-delay the bot waits out",
    "WALSH_ADAPTIVE_MAX_DELAY": "the slowest pace the bot keeps",
    "WALSH_ADAPTIVE_GIVE_UP": "the bot's pause for a struggling host",
    "WALSH_BLOCKLIST_EXTRA": "the operator's own additions to the blocklist",
    "WALSH_PURPOSES": "the purposes the bot declares",
    "WALSH_SIGNING_KEY": "the bot's signing key",
    "WALSH_SITEMAP_DISTRUST": "the time a contradicted sitemap is not used",
    "WALSH_SITEMAP_STALE": "the time a stale sitemap is not read",
    "WALSH_SITEMAP_MIN_TARGETS": "the fewest pages a sitemap must serve",
}

#: a sentence that tells the operator what to run or set
_ADVICE = re.compile(r"\brun with\b|(?:^|\s)-s\s|\bset\s+[A-Z][A-Z0-9_]{3,}\b|\bpip install\b")
_SETTING_VALUE = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)=([0-9.]+)( s\b)?")
_SETTING = re.compile(r"\bWALSH_[A-Z0-9_]+\b")
_ISO = re.compile(r"\b(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(\.\d+)?(?:\+00:00|Z)")


def for_site_owner(text: str) -> str:
    """A reason from the log as the page shows it: a sentence that tells
    the operator what to run or set is left out (that is the operator's
    log's), a setting is named in words (``WALSH_RUN_INTERVAL=86400 s`` is
    "the bot's run interval (1 day)"), and a time reads as on the page."""
    sentences = re.split(r"(?<=\.)\s+", text.strip())
    kept = " ".join(s for s in sentences if not _ADVICE.search(s))
    kept = _SETTING_VALUE.sub(_setting_value, kept)
    kept = _SETTING.sub(lambda m: SETTINGS.get(m.group(0), "a setting of the bot"), kept)
    return _ISO.sub(lambda m: f"{m.group(1)} {m.group(2)} UTC", kept)


def _setting_value(m: re.Match[str]) -> str:
    name, value, unit = m.group(1), m.group(2), m.group(3)
    words = SETTINGS.get(name, "a setting of the bot")
    shown = plain_duration(float(value)) if unit else value
    return f"{words} ({shown})"


def plain_duration(seconds: float) -> str:
    """*seconds* as a site owner reads a period: ``1.5 s``, ``58 s``,
    ``15 min 37 s``, ``2 h 5 min``, ``1 day``, ``3 days 4 h``."""
    if seconds < 10:
        return f"{seconds:.3g} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        m, s = divmod(whole, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    if whole < 86400:
        h, m = divmod(whole // 60, 60)
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(whole // 3600, 24)
    days = f"{d} day" + ("s" if d > 1 else "")
    return f"{days} {h} h" if h else days


def kind_words(kind: str) -> str:
    """What a request was for: ``robots.txt``, ``a listed page, tried again``."""
    base, _, how = kind.partition(" ")
    words = KINDS.get(base, (base or "other", ""))[0]
    suffix = {"retry": ", tried again", "hop": ", a redirect followed"}.get(how, "")
    return words + suffix


def set_by_words(set_by: str | None) -> str:
    return SET_BY.get(set_by or "floor", (set_by or "", ""))[0]
