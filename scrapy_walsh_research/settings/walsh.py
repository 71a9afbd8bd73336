"""The bundle's settings as one typed object, read and checked once per crawler.

Components ask the crawler's context for it (``context.settings``) instead
of reading ``WALSH_`` names from Scrapy's settings: each field is the
setting of that name (``min_delay`` is ``WALSH_MIN_DELAY``), read with its
default from :mod:`~scrapy_walsh_research.settings.defaults`; a renamed
setting under its old name while the new one is unset
(:data:`~scrapy_walsh_research.settings.options.RENAMED`); a list as
:func:`~scrapy_walsh_research.settings.options.list_setting` reads one.

It is built only by :meth:`WalshSettings.from_settings`, which checks every
value as it reads it (:mod:`~scrapy_walsh_research.settings.values` holds
the checks) and refuses with every problem at once, in the start-up check's
words: an object that exists holds only values the contract accepts. The
start-up check (:mod:`~scrapy_walsh_research.settings.check`) asks it for
those problems (:func:`walsh_problems`) and adds those of Scrapy's own
settings. The signer is read from the same settings in
``settings/signing.py``, and checked here with the rest.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, fields
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy.settings import BaseSettings

from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import defaults, values
from scrapy_walsh_research.settings.options import (
    cache_size,
    declared_purposes,
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


#: the fields not read by their type alone
_READERS: dict[str, Callable[[BaseSettings], Any]] = {
    "WALSH_BLOCKLIST_EXTRA": lambda s: tuple(list_setting(s, "WALSH_BLOCKLIST_EXTRA")),
    "WALSH_PURPOSES": declared_purposes,
    "WALSH_BLOCKLIST_URL": lambda s: operator_urls(s)[0],
    "WALSH_BLOCKLIST_SCHEMA_URL": lambda s: operator_urls(s)[1],
    "WALSH_POLICY_RETRY_DELAY": policy_retry_delay,
    "WALSH_POLICY_TTL": _renamed_float("WALSH_POLICY_TTL"),
    "WALSH_POLICY_CACHE_SIZE": _renamed_cache_size("WALSH_POLICY_CACHE_SIZE"),
    "WALSH_HOST_CLOCK_CACHE_SIZE": _cache_size("WALSH_HOST_CLOCK_CACHE_SIZE"),
    "WALSH_CADENCE_CACHE_SIZE": _cache_size("WALSH_CADENCE_CACHE_SIZE"),
    "WALSH_LIST_LOOKAHEAD": _cache_size("WALSH_LIST_LOOKAHEAD"),
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
#: what a value of each type is, for a value that is not one
_KINDS = {"float": "a number", "int": "a whole number", "bool": "True or False"}

#: set only while :meth:`WalshSettings.from_settings` builds the object it checked
_CHECKED: ContextVar[bool] = ContextVar("walsh_settings_checked", default=False)


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
    purposes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not _CHECKED.get():
            raise TypeError(
                "WalshSettings is built only by WalshSettings.from_settings, which refuses "
                "the values the start-up check refuses"
            )

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> WalshSettings:
        """Read and check every field from *settings*; a value the contract
        refuses raises :class:`WalshConfigurationError` listing every problem,
        as the start-up check does."""
        read, found = _read(settings)
        if found:
            raise values.refusal(found)
        token = _CHECKED.set(True)
        try:
            return cls(**read)
        finally:
            _CHECKED.reset(token)

    @classmethod
    def at_defaults(cls) -> WalshSettings:
        """Every field at its default (what a Redis connection made outside
        a crawl, for a test or a command, works with)."""
        return _at_defaults()


def walsh_problems(settings: BaseSettings) -> list[str]:
    """Every ``WALSH_`` value in *settings* that :meth:`WalshSettings.from_settings`
    refuses, each saying what to change (for the start-up check)."""
    return _read(settings)[1]


def _read(settings: BaseSettings) -> tuple[dict[str, Any], list[str]]:
    """Every field's value from *settings*, and every problem with them."""
    found = values.problems(settings)
    read: dict[str, Any] = {}
    for f in fields(WalshSettings):
        name = f"WALSH_{f.name.upper()}"
        reader = _READERS.get(name)
        try:
            if reader is not None:
                read[f.name] = reader(settings)
            else:
                read[f.name] = _BY_TYPE[str(f.type)](settings, name, getattr(defaults, name))
        except WalshConfigurationError as exc:
            if str(exc) not in found:
                found.append(str(exc))
        except (TypeError, ValueError):
            used = name_in_use(settings, name)
            if not any(problem.startswith(f"{used}=") for problem in found):
                found.append(
                    f"{used}={settings.get(used)!r}: not {_KINDS.get(str(f.type), 'a value')} "
                    f"(default {getattr(defaults, name)!r})."
                )
    return read, found


@cache
def _at_defaults() -> WalshSettings:
    return WalshSettings.from_settings(BaseSettings())
