"""Every check of a ``WALSH_`` value, in one place.

:meth:`~scrapy_walsh_research.settings.walsh.WalshSettings.from_settings`
runs them all while it reads the values, and refuses with every problem
found, so no component is handed a value the contract refuses; the start-up
check (:mod:`~scrapy_walsh_research.settings.check`) lists the same problems
by asking it, beside the problems of Scrapy's own settings. No other module
checks a ``WALSH_`` value. Each problem says what to change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy_walsh_research.core.blocklist.entries import entry_hosts, names_host
from scrapy_walsh_research.errors import WalshConfigurationError
from scrapy_walsh_research.settings import adaptive, defaults
from scrapy_walsh_research.settings.options import (
    RENAMED,
    declared_purposes,
    list_setting,
    name_in_use,
    operator_urls,
)
from scrapy_walsh_research.settings.signing import request_signer

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

#: how a refusal of the configuration begins (its problems follow, one a line)
REFUSAL = "The Walsh-Research configuration is not conformant; refusing to crawl:\n  - "

#: R4: at most one request per second per host, whatever WALSH_MIN_DELAY says
MIN_DELAY_FLOOR = 1.0
#: the longest an opt-out may wait to be read: a day (RFC 9309 §2.4)
MAX_FRESHNESS_S = 86400.0
#: a sitemap and its probe are two requests: fewer due targets cannot repay them
MIN_SITEMAP_TARGETS = 3


def refusal(found: list[str]) -> WalshConfigurationError:
    """The one error a configuration with the problems *found* is refused with."""
    return WalshConfigurationError(REFUSAL + "\n  - ".join(found))


def problems(settings: BaseSettings) -> list[str]:
    """Every ``WALSH_`` value in *settings* the contract refuses."""
    min_delay = _number(settings, "WALSH_MIN_DELAY")
    too_short = None if min_delay is None else min_delay_problem(min_delay)
    found = [too_short] if too_short is not None else []
    margin = _number(settings, "WALSH_PACING_MARGIN")
    if margin is not None and margin < 0:
        found.append(
            f"WALSH_PACING_MARGIN={margin}: it is added to every interval and cannot be negative."
        )
    # the adaptive half of R4/R5: nothing may switch it off or weaken it
    # below its documented floor (docs/adaptive.rst)
    found.extend(adaptive.problems(settings.get))
    found.extend(_list_problems(settings) + _blocklist_problems(settings))
    found.extend(_freshness_problems(settings) + _retention_problems(settings))
    found.extend(_sitemap_problems(settings) + _audit_problems(settings))
    found.extend(_signing_problems(settings))
    return found


def min_delay_problem(min_delay: float) -> str | None:
    """What is wrong with *min_delay* as ``WALSH_MIN_DELAY``, or None."""
    if min_delay < MIN_DELAY_FLOOR:
        return (
            f"WALSH_MIN_DELAY={min_delay}: R4 allows at most one request per second per host. "
            f"Set WALSH_MIN_DELAY to {MIN_DELAY_FLOOR} or more."
        )
    return None


def _number(settings: BaseSettings, name: str) -> float | None:
    """Setting *name* (its default when unset), or None when it is no number
    (the typed settings' reader says so, naming it)."""
    try:
        return float(settings.getfloat(name, getattr(defaults, RENAMED.get(name, name))))
    except (TypeError, ValueError):
        return None


def _freshness_problems(settings: BaseSettings) -> list[str]:
    """Settings that would keep an opt-out (a new blocklist entry, a robots.txt
    or tdmrep.json that now says no) from being read for more than a day, or
    a failed fetch from ever being tried again."""
    found: list[str] = []
    unread = "an opt-out would wait longer than a day to be read"
    untried = "a failed fetch would not be tried again within a day"
    # a renamed setting is named as the project set it (its old name still counts)
    within_a_day = [
        ("WALSH_BLOCKLIST_MAX_REFRESH", unread),
        (name_in_use(settings, "WALSH_POLICY_TTL"), unread),
        ("WALSH_BLOCKLIST_RETRY_DELAY", untried),
        (name_in_use(settings, "WALSH_POLICY_RETRY_DELAY"), untried),
    ]
    for name, why in within_a_day:
        value = _number(settings, name)
        if value is not None and not 0 < value <= MAX_FRESHNESS_S:
            default = getattr(defaults, RENAMED.get(name, name))
            found.append(
                f"{name}={value:g}: {why}. Set it above 0 and at most "
                f"{MAX_FRESHNESS_S:g} seconds (default {default:g})."
            )
    left = "a target waits for a robots.txt, tdmrep.json or blocklist a transient failure left"
    visit = "targets wait for a host's Visit-time window"
    for name, wait in (("WALSH_POLICY_WAIT", f"{left} unknown"), ("WALSH_VISIT_TIME_WAIT", visit)):
        value = _number(settings, name)
        if value is not None and not 0 <= value <= MAX_FRESHNESS_S:
            found.append(
                f"{name}={value:g}: how long {wait}. Set it from 0 (no wait) to "
                f"{MAX_FRESHNESS_S:g} seconds (default {getattr(defaults, name):g})."
            )
    least = _number(settings, "WALSH_BLOCKLIST_MIN_REFRESH")
    most = _number(settings, "WALSH_BLOCKLIST_MAX_REFRESH")
    if least is not None and most is not None and not 0 < least <= most:
        found.append(
            f"WALSH_BLOCKLIST_MIN_REFRESH={least:g}: it must be above 0 and at most "
            f"WALSH_BLOCKLIST_MAX_REFRESH (default {defaults.WALSH_BLOCKLIST_MIN_REFRESH:g})."
        )
    return found


def _list_problems(settings: BaseSettings) -> list[str]:
    """List settings whose value has no list shape, and WALSH_PURPOSES that
    are unknown, forbidden (R6) or leave out ``tdm``."""
    found: list[str] = []
    for name in ("WALSH_BLOCKLIST_EXTRA", "WALSH_SIGNATURE_COMPONENTS"):
        try:
            list_setting(settings, name)
        except WalshConfigurationError as exc:
            found.append(str(exc))
    try:
        declared_purposes(settings)
    except WalshConfigurationError as exc:
        found.append(str(exc))
    return found


def _blocklist_problems(settings: BaseSettings) -> list[str]:
    """The operator's documents over plain http (unless a sandbox allows it),
    and a ``WALSH_BLOCKLIST_EXTRA`` entry that names no host (it would block
    nothing)."""
    found: list[str] = []
    try:
        allow_http = settings.getbool("WALSH_BLOCKLIST_ALLOW_HTTP")
    except ValueError:
        allow_http = False  # the typed settings' reader names it
    schemes = ("https", "http") if allow_http else ("https",)
    url, schema_url = operator_urls(settings)
    for name, value in (("WALSH_BLOCKLIST_URL", url), ("WALSH_BLOCKLIST_SCHEMA_URL", schema_url)):
        if urlsplit(value).scheme.lower() not in schemes:
            found.append(
                f"{name}={value!r} is not an https URL. The blocklist must come over "
                "https; set WALSH_BLOCKLIST_ALLOW_HTTP=True only for a local sandbox."
            )
    try:
        extra = list_setting(settings, "WALSH_BLOCKLIST_EXTRA")
    except WalshConfigurationError:
        return found  # said by _list_problems
    unusable = [d for d in extra if not all(map(names_host, entry_hosts(d) or {""}))]
    if unusable:
        found.append(
            f"WALSH_BLOCKLIST_EXTRA: {unusable[0]!r} names no host, so it would block "
            "nothing. Give host names or URLs (e.g. -s WALSH_BLOCKLIST_EXTRA=a.test,b.test "
            "or -s 'WALSH_BLOCKLIST_EXTRA=[\"a.test\"]')."
        )
    return found


def _sitemap_problems(settings: BaseSettings) -> list[str]:
    """``WALSH_SITEMAP*`` values that cannot repay a sitemap's requests, or
    are no time."""
    found: list[str] = []
    try:
        least = int(settings.get("WALSH_SITEMAP_MIN_TARGETS", defaults.WALSH_SITEMAP_MIN_TARGETS))
    except (TypeError, ValueError):
        least = 0
    if least < MIN_SITEMAP_TARGETS:
        found.append(
            f"WALSH_SITEMAP_MIN_TARGETS={settings.get('WALSH_SITEMAP_MIN_TARGETS')!r}: a host's "
            "sitemap and the target that checks it are two requests; fewer due targets cannot "
            f"repay them. Set it to an integer of {MIN_SITEMAP_TARGETS} or more (default "
            f"{defaults.WALSH_SITEMAP_MIN_TARGETS})."
        )
    for name in ("WALSH_SITEMAP_TTL", "WALSH_SITEMAP_DISTRUST", "WALSH_SITEMAP_STALE"):
        try:
            value = float(settings.get(name, getattr(defaults, name)))
        except (TypeError, ValueError):
            value = -1.0
        if value < 0:
            found.append(f"{name}={settings.get(name)!r}: a number of seconds, 0 or more "
                         f"(default {getattr(defaults, name):g}).")  # fmt: skip
    return found


def _retention_problems(settings: BaseSettings) -> list[str]:
    """How long stored state and fed records are kept (``WALSH_STATE_TTL``,
    ``WALSH_RECORDS_TTL``): some time, or what a crawl stores would be gone
    before it is read."""
    found: list[str] = []
    for name in ("WALSH_STATE_TTL", "WALSH_RECORDS_TTL"):
        try:
            value = float(settings.get(name, getattr(defaults, name)))
        except (TypeError, ValueError):
            value = 0.0
        if not value > 0:
            found.append(f"{name}={settings.get(name)!r}: a number of seconds above 0 "
                         f"(default {getattr(defaults, name):g}).")  # fmt: skip
    return found


def _audit_problems(settings: BaseSettings) -> list[str]:
    """An audit log kept no time (it is the evidence a site owner is shown),
    or kept somewhere other than PostgreSQL by ``WALSH_AUDIT_URL``."""
    found: list[str] = []
    for name, instead in (
        ("WALSH_AUDIT_RETENTION", "delete it. Give how long to keep entries, in seconds "
         f"(default {defaults.WALSH_AUDIT_RETENTION}, 90 days)"),
        ("WALSH_AUDIT_REDIS_WINDOW", "keep none of it. Give how long a fleet keeps its entries "
         f"in Redis, in seconds (default {defaults.WALSH_AUDIT_REDIS_WINDOW:.0f}, 7 days), or "
         "set WALSH_AUDIT_URL to keep WALSH_AUDIT_RETENTION of them in PostgreSQL"),
    ):  # fmt: skip
        value = _number(settings, name)
        if value is not None and not value > 0:
            found.append(
                f"{name}={settings.get(name)!r}: the audit log is the evidence a site owner is "
                f"shown, and this would {instead}."
            )
    url = settings.get("WALSH_AUDIT_URL")
    if url and urlsplit(str(url)).scheme not in ("postgresql", "postgres"):
        found.append(
            f"WALSH_AUDIT_URL={url!r}: the fleet's audit log for months is a PostgreSQL "
            "table; give a postgresql://user:password@host:port/database URL, or unset it "
            "(the audit then goes to Redis for WALSH_AUDIT_REDIS_WINDOW, or to "
            "audit.sqlite3 in WALSH_STATE_DIR without Redis)."
        )
    return found


def _signing_problems(settings: BaseSettings) -> list[str]:
    """With WALSH_SIGNING_KEY set, the key and the signature settings must
    be usable now: a bot that meant to sign must not start unsigned."""
    try:
        request_signer(settings)
    except WalshConfigurationError as exc:
        return [str(exc)]
    return []
