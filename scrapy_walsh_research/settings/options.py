"""The readers of the ``WALSH_`` settings more than one component reads:
one reader each, so every component reads a setting the same way.

List-valued settings: one reader, so every spelling works. Users write a
list setting three ways: a Python list in ``settings.py``, ``-s NAME=a,b`` on
the command line (Scrapy's ``getlist`` splits on commas) and
``-s 'NAME=["a", "b"]'``, the JSON Scrapy itself accepts for dict settings.
``getlist`` reads the JSON form as one item, ``'["a"'``... : a blocklist
entry that names no host and was dropped, so a host the operator meant to
block was crawled. Every list-valued setting is read here; a value that is
none of these shapes stops the crawl with the setting's name, never silently
shrinks.

Cache bounds: a list of 10^5 targets over 10^4 hosts must not keep 10^4
parsed robots.txt files, host clocks and 10^5 cadence times in memory at
once. Each cache is a least-recently-used window over state that is also in
the state store; what falls out is read back from there when needed, never
refetched from the host sooner than it would have been, and never lets a
request go sooner than its interval. Correctness lives in the store and the
gates; the caches only make them fast.

Renamed settings: a setting renamed since 0.2.0 is still read under its old
name while the new one is unset (the start-up check warns about it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrapy_walsh_research._moved import MOVED
from scrapy_walsh_research.components import PREFERENCES_MW, SITEMAPS_MW, loaded, name_of
from scrapy_walsh_research.core.preferences.model import FORBIDDEN_PURPOSES, PURPOSES, TDM
from scrapy_walsh_research.core.urls import url_host
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import defaults

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def list_setting(settings: BaseSettings, name: str) -> list[str]:
    """The strings *name* lists: a list or tuple of strings, a JSON array of
    strings, or comma-separated text (items stripped, empty ones dropped)."""
    return parse_list(name, settings.get(name))


def parse_list(name: str, raw: Any) -> list[str]:
    """:func:`list_setting` for a value already read (*name* is for the error)."""
    if raw is None:
        return []
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith(("[", "{")):
            try:
                raw = json.loads(text)
            except ValueError as exc:
                raise WalshConfigurationError(
                    f"{name}={raw!r} starts like JSON but is not ({exc}). Write "
                    f'it as JSON (-s \'{name}=["a.test", "b.test"]\') or comma-separated '
                    f"(-s {name}=a.test,b.test)."
                ) from None
        else:
            return [item.strip() for item in text.split(",") if item.strip()]
    if isinstance(raw, (list, tuple, set, frozenset)):
        items = list(raw)
        wrong = [item for item in items if not isinstance(item, str)]
        if wrong:
            raise WalshConfigurationError(
                f"{name}: every item must be a string; got {wrong[0]!r} "
                f"({type(wrong[0]).__name__})."
            )
        return [item.strip() for item in items if item.strip()]
    raise WalshConfigurationError(
        f"{name}={raw!r} is a {type(raw).__name__}, not a list: give a list of strings, "
        f"a JSON array or comma-separated text."
    )


def operator_urls(settings: BaseSettings) -> tuple[str, str]:
    """The operator's documents: the blocklist's URL and its schema's."""
    return (
        settings.get("WALSH_BLOCKLIST_URL") or defaults.WALSH_BLOCKLIST_URL,
        settings.get("WALSH_BLOCKLIST_SCHEMA_URL") or defaults.WALSH_BLOCKLIST_SCHEMA_URL,
    )


def operator_hosts(settings: BaseSettings) -> frozenset[str]:
    """The hosts the operator's documents come from (R3's own fetches go
    only there; R2 exempts them)."""
    return frozenset(url_host(url) for url in operator_urls(settings))


def declared_purposes(settings: BaseSettings) -> tuple[str, ...]:
    """``WALSH_PURPOSES``: what the bot declares it does with what it fetches
    (default :data:`~scrapy_walsh_research.settings.defaults.WALSH_PURPOSES`).
    Unknown purposes, ones the contract forbids, and a list without ``tdm``
    are refused, naming the setting."""
    if settings.get("WALSH_PURPOSES") is None:
        return defaults.WALSH_PURPOSES
    purposes = [p.lower() for p in list_setting(settings, "WALSH_PURPOSES")]
    problems = purpose_problems(purposes)
    if problems:
        raise WalshConfigurationError(" ".join(problems))
    return tuple(dict.fromkeys(purposes))


def purpose_problems(purposes: Sequence[str]) -> list[str]:
    """What is wrong with *purposes* as WALSH_PURPOSES, each saying what to change."""
    found: list[str] = []
    unknown = [p for p in purposes if p not in PURPOSES]
    if unknown:
        found.append(
            f"WALSH_PURPOSES names {', '.join(map(repr, unknown))}: not a purpose. Choose from "
            f"{', '.join(PURPOSES)} (default: {', '.join(defaults.WALSH_PURPOSES)})."
        )
    for purpose in purposes:
        if purpose in FORBIDDEN_PURPOSES:
            found.append(
                f"WALSH_PURPOSES declares {purpose!r}: {FORBIDDEN_PURPOSES[purpose]}. "
                f"Remove it (a project that does this is not a Walsh-Research bot)."
            )
    if TDM not in purposes:
        found.append(
            f"WALSH_PURPOSES={list(purposes)!r} leaves out {TDM!r}: every record is text and "
            "data mining of metadata, so the bot always declares it (sites' TDM reservations "
            f"must apply). Set WALSH_PURPOSES to include {TDM!r} (default: "
            f"{', '.join(defaults.WALSH_PURPOSES)})."
        )
    return found


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


#: settings renamed since 0.2.0: the old name -> the name that says what it governs
RENAMED = {
    "WALSH_ROBOTS_RETRY_DELAY": "WALSH_POLICY_RETRY_DELAY",
    # they govern tdmrep.json too
    "WALSH_ROBOTS_TTL": "WALSH_POLICY_TTL",
    "WALSH_ROBOTS_CACHE_SIZE": "WALSH_POLICY_CACHE_SIZE",
}
#: the release whose name each old one is
RENAMED_FROM = {
    "WALSH_ROBOTS_RETRY_DELAY": "0.2.0",
    "WALSH_ROBOTS_TTL": "0.3.0",
    "WALSH_ROBOTS_CACHE_SIZE": "0.3.0",
}


def renamed_in_use(settings: BaseSettings) -> list[tuple[str, str]]:
    """(old name, new name) of each renamed setting *settings* set by its old name."""
    return [(old, new) for old, new in RENAMED.items() if settings.get(old) is not None]


def name_in_use(settings: BaseSettings, name: str) -> str:
    """*name*, or its 0.2.0 name when only that one is set, or when it is set
    with a higher priority (``-s OLD=...`` on the command line beats the new
    name in a project's settings, as it would any setting)."""
    for old, new in RENAMED.items():
        if new != name or settings.get(old) is None:
            continue
        if settings.get(name) is None or (settings.getpriority(old) or 0) > (
            settings.getpriority(name) or 0
        ):
            return old
    return name


def _renamed_seconds(settings: BaseSettings, name: str) -> float:
    """Setting *name* in seconds, under its old name while *name* is unset."""
    used = name_in_use(settings, name)
    if used != name:
        return float(settings.get(used))
    return settings.getfloat(name, getattr(defaults, name))


def policy_retry_delay(settings: BaseSettings) -> float:
    """``WALSH_POLICY_RETRY_DELAY``: the first wait before a policy document
    (robots.txt, tdmrep.json, a blocklist not yet in force) that could not be
    read is tried again. Under its 0.2.0 name, ``WALSH_ROBOTS_RETRY_DELAY``,
    while the new name is unset."""
    return _renamed_seconds(settings, "WALSH_POLICY_RETRY_DELAY")


def policy_ttl(settings: BaseSettings) -> float:
    """``WALSH_POLICY_TTL``: how long an origin's robots.txt and tdmrep.json
    are cached. Under its 0.3.0 name, ``WALSH_ROBOTS_TTL``, while the new
    name is unset."""
    return _renamed_seconds(settings, "WALSH_POLICY_TTL")


def policy_cache_size(settings: BaseSettings) -> int:
    """``WALSH_POLICY_CACHE_SIZE``: the parsed robots.txt (and tdmrep.json)
    answers kept in memory. Under its 0.3.0 name, ``WALSH_ROBOTS_CACHE_SIZE``,
    while the new name is unset."""
    name = name_in_use(settings, "WALSH_POLICY_CACHE_SIZE")
    return cache_size(settings, name, defaults.WALSH_POLICY_CACHE_SIZE)


#: the settings that name components by path (a dict's keys, or one value)
COMPONENT_SETTINGS = (
    "ADDONS",
    "DOWNLOADER_MIDDLEWARES",
    "SPIDER_MIDDLEWARES",
    "EXTENSIONS",
    "ITEM_PIPELINES",
    "DOWNLOAD_HANDLERS",
    "SCHEDULER",
)


def deprecated_names(settings: BaseSettings) -> list[str]:
    """The 0.2.0 names *settings* still use (component paths that moved,
    settings that were renamed), each with what to write instead. They work
    until 0.4.0; the start-up check warns about each once per crawl."""
    found = [
        f"{old} is the {RENAMED_FROM[old]} name of {new}, which is what it governs now: rename it "
        "in your settings (the old name is read while the new one is unset)."
        for old, new in renamed_in_use(settings)
    ]
    for setting in COMPONENT_SETTINGS:
        value = settings.get(setting)
        if isinstance(value, str):
            paths = [value]
        elif setting == "DOWNLOAD_HANDLERS":
            paths = [v for v in settings.getdict(setting).values() if isinstance(v, str)]
        else:
            paths = [k for k in settings.getdict(setting) if isinstance(k, str)]
        for path in paths:
            if path.rpartition(".")[0] in MOVED:
                now = name_of(loaded(path))
                found.append(
                    f"{setting} names {path}, a 0.2.0 path: write {now} (the old path "
                    "goes in 0.4.0)."
                )
    return list(dict.fromkeys(found))  # DOWNLOAD_HANDLERS names one path twice


def sitemap_order_problems(order: dict[str, int]) -> list[str]:
    """The sitemaps gate's place among the enabled downloader middlewares
    (*order*, by path): a gate before the policy gates would skip a target
    they refuse."""
    mine, before = order.get(SITEMAPS_MW), order.get(PREFERENCES_MW)
    if mine is not None and before is not None and mine <= before:
        return [
            f"DOWNLOADER_MIDDLEWARES orders the sitemaps gate ({mine}) at or before the "
            f"preferences gate ({before}): a target is skipped only once the blocklist, "
            "robots.txt and the usage preferences have let it through. Give the sitemaps "
            "gate the higher number."
        ]
    return []
