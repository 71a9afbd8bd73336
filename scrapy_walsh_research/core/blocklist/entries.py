"""A blocklist's entries: each ``domain`` read leniently, and the set they make.

An operator's opt-out is never dropped for its spelling: a URL, a ``*.``
prefix, a port, quotes or several names in one ``domain`` still name hosts.
The :class:`DomainSet` matches a host against the entries by apex and
subdomain, walking whole labels (``xblocked.test`` is not under
``blocked.test``), at a cost that does not grow with the list.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from scrapy_walsh_research.core.urls import host_variants, is_ip, normalize_host

logger = logging.getLogger(__name__)

_SEPARATORS = re.compile(r"[\s,;]+")
_QUOTES = "\"'`<>"
#: how many entries a replaced list gives back at a time (see DomainSet.release)
_RELEASE_STEP = 2000


def _entry_host(raw: str) -> str:
    text = raw.strip().strip(_QUOTES)
    if text.startswith("//"):
        text = "http:" + text  # a scheme-relative URL
    if "://" in text:
        try:
            text = urlsplit(text).netloc
        except ValueError:  # bad brackets: read the authority loosely
            text = text.partition("://")[2]
    text = re.split(r"[/?#]", text, maxsplit=1)[0]
    text = text.rsplit("@", 1)[-1]
    return text.lstrip("*").lstrip(".")


def _entry_parts(raw: str) -> list[str]:
    """The host names in one ``domain`` value: usually one; an operator who
    wrote several (``"a.test, b.test"``) meant each of them."""
    return [p for p in (_entry_host(x) for x in _SEPARATORS.split(raw.strip())) if p]


def normalize_entry(raw: str) -> str:
    """Read a blocklist ``domain`` leniently: a URL, ``*.`` prefix, port,
    quotes, a query or several names still name hosts. An opt-out is never
    dropped for its spelling."""
    parts = _entry_parts(raw)
    return normalize_host(parts[0]) if parts else ""


#: a lower-case LDH host name whose last label is not all digits (never an
#: IP address spelling)
PLAIN_HOST = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?"
)


def entry_hosts(raw: str) -> set[str]:
    """Every normalised host an entry names: one per name written, several
    for a name IDNA 2003 and UTS #46 encode differently (see
    :func:`host_variants`)."""
    out: set[str] = set()
    for part in _entry_parts(raw):
        out |= host_variants(part)
    return out


#: a normalised host name: LDH labels (``_`` too, as names in the wild have it)
_HOST_NAME = re.compile(r"(?:[a-z0-9_](?:[a-z0-9_-]{0,62})\.)*[a-z0-9_](?:[a-z0-9_-]{0,62})")


def names_host(host: str) -> bool:
    """Whether a normalised entry host could be a host the crawl contacts."""
    return is_ip(host) or _HOST_NAME.fullmatch(host) is not None


class DomainSet:
    """Apex-and-subdomain matcher whose lookup cost is O(labels of the host).

    ``xblocked.test`` is not under ``blocked.test``: matching walks whole
    labels, never a string suffix.
    """

    def __init__(
        self, entries: Mapping[str, dict[str, Any]] | None = None, also: DomainSet | None = None
    ) -> None:
        self._entries: Mapping[str, dict[str, Any]] = dict(entries or {})
        #: a second set consulted after this one (the local entries beside a
        #: fetched list): chained, not merged, since copying a 10^6-entry
        #: dict is one C call that holds the GIL (a reactor stall)
        self._also = also

    @classmethod
    def _over(
        cls, entries: Mapping[str, dict[str, Any]], also: DomainSet | None = None
    ) -> DomainSet:
        """A set over *entries* as they are, not copied."""
        out = cls(also=also)
        out._entries = entries
        return out

    @classmethod
    def from_index(cls, index: Mapping[str, dict[str, Any]]) -> DomainSet:
        """A set over *index* as it is (an :class:`IndexFile`), not copied."""
        return cls._over(index)

    @classmethod
    def from_entries(cls, entries: list[dict[str, Any]], source: str) -> DomainSet:
        out: dict[str, dict[str, Any]] = {}
        for entry in entries:
            raw = str(entry.get("domain", ""))
            if PLAIN_HOST.fullmatch(raw) and "xn--" not in raw:
                # the usual entry: one lower-case LDH name, which every
                # reading below leaves as it is (tests/test_r3_large_blocklist
                # checks that); 10x faster on a 10^6-entry list
                out.setdefault(raw, {**entry, "source": source})
                continue
            domains = entry_hosts(raw)
            if domains and sorted(domains) != sorted(host_variants(raw.strip())):
                logger.warning(
                    "Blocklist entry %r read leniently (%s) as: %s",
                    raw, source, ", ".join(sorted(domains)),
                )  # fmt: skip
            if not domains:
                logger.error(
                    "Blocklist entry with no usable domain ignored (%s): %r", source, entry
                )
                continue
            for domain in sorted(domains):
                out.setdefault(domain, {**entry, "source": source})
        return cls(out)

    @property
    def entries(self) -> Mapping[str, dict[str, Any]]:
        """This set's own entries (host name -> entry), without those of the
        set chained after it. Read it, do not change it."""
        return self._entries

    def shares_entries_with(self, other: DomainSet) -> bool:
        """Whether *other* holds this set's own entries (not a copy)."""
        return self._entries is other._entries

    def release(self) -> None:
        """Empty this set's own entries a little at a time (call it in a
        thread, on a set no longer in force): freeing 10^6 entries at once is
        one C call that holds the GIL for ~0.3 s. A mapped index is left to
        be unmapped when the last reference goes; the chained set is kept."""
        entries = self._entries
        while isinstance(entries, dict) and entries:
            for _ in range(min(_RELEASE_STEP, len(entries))):
                entries.popitem()

    def __len__(self) -> int:
        return len(self._entries) + (len(self._also) if self._also is not None else 0)

    def union(self, other: DomainSet) -> DomainSet:
        """This set, then *other* where this one has no entry. A large set is
        shared, not copied (copying 10^6 entries holds the GIL ~0.1 s)."""
        if len(self._entries) <= len(other):
            return DomainSet({**other._entries, **self._entries})
        return DomainSet._over(self._entries, also=other)

    def _get(self, name: str) -> dict[str, Any] | None:
        entry = self._entries.get(name)
        if entry is None and self._also is not None:
            entry = self._also._get(name)
        return entry

    def match(self, host: str) -> tuple[str, dict[str, Any]] | None:
        host = normalize_host(host)
        if not host:
            return None
        if is_ip(host):
            entry = self._get(host)
            return (host, entry) if entry else None
        labels = host.split(".")
        for i in range(len(labels)):
            candidate = ".".join(labels[i:])
            entry = self._get(candidate)
            if entry is not None:
                return candidate, entry
        return None
