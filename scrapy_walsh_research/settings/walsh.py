"""The bundle's settings as one typed object, read once per crawler.

Components ask the crawler's context for it (``context.settings``) instead
of reading ``WALSH_`` names from Scrapy's settings: each field is the
setting of that name (``min_delay`` is ``WALSH_MIN_DELAY``), read with its
default from :mod:`~scrapy_walsh_research.settings.defaults`; a renamed
setting under its old name while the new one is unset
(:data:`~scrapy_walsh_research.settings.options.RENAMED`); a cache bound
checked as its reader in :mod:`~scrapy_walsh_research.settings.options`
checks it (same message), and so is an audit log kept no time
(``WALSH_AUDIT_RETENTION``, ``WALSH_AUDIT_REDIS_WINDOW``); ``WALSH_BLOCKLIST_EXTRA`` as
:func:`~scrapy_walsh_research.settings.options.list_setting` reads a list.
The keys' paths are fields (the commands read them); ``WALSH_PURPOSES``,
``WALSH_SIGNATURE_COMPONENTS`` and the signer are read and checked by their
own readers there and in ``settings/signing.py``. The
start-up check (:mod:`~scrapy_walsh_research.settings.check`) still
refuses, before any request, what no field's reader can see alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy.settings import BaseSettings

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import defaults
from scrapy_walsh_research.settings.options import (
    cache_size,
    list_setting,
    name_in_use,
    operator_urls,
    policy_retry_delay,
)

if TYPE_CHECKING:
    from collections.abc import Callable


def _renamed_float(new: str) -> Callable[[BaseSettings], float]:
    """The reader of *new*, a renamed setting: its old name while it is unset."""

    def read(settings: BaseSettings) -> float:
        name = name_in_use(settings, new)
        return settings.getfloat(name, getattr(defaults, new))

    return read


def _renamed_cache_size(new: str) -> Callable[[BaseSettings], int]:
    def read(settings: BaseSettings) -> int:
        return cache_size(settings, name_in_use(settings, new), getattr(defaults, new))

    return read


def _cache_size(name: str) -> Callable[[BaseSettings], int]:
    return lambda settings: cache_size(settings, name, getattr(defaults, name))


def _audit_seconds(name: str, instead: str) -> Callable[[BaseSettings], float]:
    """The reader of *name*, seconds refused unless above 0: the audit log is
    the evidence a site owner is shown, and 0 would *instead*."""

    def read(settings: BaseSettings) -> float:
        value = settings.getfloat(name, getattr(defaults, name))
        if not value > 0:
            raise WalshConfigurationError(
                f"{name}={settings.get(name)!r}: the audit log is the evidence a site owner is "
                f"shown, and this would {instead}."
            )
        return value

    return read


#: the fields not read by their type alone
_READERS: dict[str, Callable[[BaseSettings], Any]] = {
    "WALSH_BLOCKLIST_EXTRA": lambda s: tuple(list_setting(s, "WALSH_BLOCKLIST_EXTRA")),
    "WALSH_BLOCKLIST_URL": lambda s: operator_urls(s)[0],
    "WALSH_BLOCKLIST_SCHEMA_URL": lambda s: operator_urls(s)[1],
    "WALSH_POLICY_RETRY_DELAY": policy_retry_delay,
    "WALSH_POLICY_TTL": _renamed_float("WALSH_POLICY_TTL"),
    "WALSH_POLICY_CACHE_SIZE": _renamed_cache_size("WALSH_POLICY_CACHE_SIZE"),
    "WALSH_HOST_CLOCK_CACHE_SIZE": _cache_size("WALSH_HOST_CLOCK_CACHE_SIZE"),
    "WALSH_CADENCE_CACHE_SIZE": _cache_size("WALSH_CADENCE_CACHE_SIZE"),
    "WALSH_LIST_LOOKAHEAD": _cache_size("WALSH_LIST_LOOKAHEAD"),
    "WALSH_AUDIT_RETENTION": _audit_seconds(
        "WALSH_AUDIT_RETENTION",
        "delete it. Give how long to keep entries, in seconds "
        f"(default {defaults.WALSH_AUDIT_RETENTION}, 90 days)",
    ),
    "WALSH_AUDIT_REDIS_WINDOW": _audit_seconds(
        "WALSH_AUDIT_REDIS_WINDOW",
        "keep none of it. Give how long a fleet keeps its entries in Redis, in seconds "
        f"(default {defaults.WALSH_AUDIT_REDIS_WINDOW:.0f}, 7 days), or set WALSH_AUDIT_URL "
        "to keep WALSH_AUDIT_RETENTION of them in PostgreSQL",
    ),
}

#: how a field of each type is read (its default from ``defaults``)
_BY_TYPE: dict[str, Callable[[BaseSettings, str, Any], Any]] = {
    "float": lambda s, name, default: s.getfloat(name, default),
    "int": lambda s, name, default: s.getint(name, default),
    "bool": lambda s, name, default: s.getbool(name, default),
    # an empty string is unset, as ``settings.get(name) or default`` had it
    "str": lambda s, name, default: s.get(name) or default,
    "str | None": lambda s, name, default: s.get(name) or default,
}


@dataclass(frozen=True)
class WalshSettings:
    """The ``WALSH_`` settings in force for one crawler (field ``x`` is
    ``WALSH_X``; docs/reference.rst says what each governs)."""

    blocklist_url: str
    blocklist_schema_url: str
    blocklist_allow_http: bool
    blocklist_extra: tuple[str, ...]
    blocklist_retry_delay: float
    blocklist_min_refresh: float
    blocklist_max_refresh: float
    blocklist_max_bytes: int
    state_dir: str | None
    signing_key: str | None
    signature_agent: str
    attestation_key: str | None
    audit_retention: float
    audit_url: str | None
    audit_redis_window: float
    gc_freeze: bool
    redis_url: str | None
    redis_prefix: str
    redis_targets_key: str
    redis_margin: float
    redis_lease: float
    redis_max_backoff: float
    records_ttl: float
    policy_ttl: float
    policy_retry_delay: float
    policy_wait: float
    visit_time_wait: float
    min_delay: float
    pacing_margin: float
    max_crawl_delay: float
    retry_times: int
    retry_base_delay: float
    retry_max_delay: float
    run_interval: float
    llms_probe: bool
    only_new: bool
    state_ttl: float
    sitemaps: bool
    sitemap_min_targets: int
    sitemap_ttl: float
    sitemap_distrust: float
    sitemap_stale: float
    policy_cache_size: int
    host_clock_cache_size: int
    cadence_cache_size: int
    list_lookahead: int

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WalshSettings:
        """Read every field from *settings* (a bad cache bound is refused
        here, with the message its reader gives)."""
        values = {}
        for f in fields(cls):
            name = f"WALSH_{f.name.upper()}"
            reader = _READERS.get(name)
            if reader is not None:
                values[f.name] = reader(settings)
            else:
                values[f.name] = _BY_TYPE[str(f.type)](settings, name, getattr(defaults, name))
        return cls(**values)

    @classmethod
    def at_defaults(cls) -> WalshSettings:
        """Every field at its default (what a Redis connection made outside
        a crawl, for a test or a command, works with)."""
        return _at_defaults()


@cache
def _at_defaults() -> WalshSettings:
    return WalshSettings.from_settings(BaseSettings())
