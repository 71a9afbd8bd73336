"""Where the Redis store keeps what is stored per URL or origin: one hash
per namespace and host, each value stamped with when it was written.

``<prefix>:state:<namespace>:<host>`` holds the entries of one host in one
namespace of :data:`~scrapy_walsh_research.state.namespaces.BY_HOST`; every
write refreshes the hash's expiry to the namespace's retention
(:func:`~scrapy_walsh_research.state.namespaces.retention`), so a host
left alone goes as a whole, and stamps each value (``<unix seconds> <JSON>``)
so that, inside a host written to all the time, entries older than the
retention are dropped a few at a time by the writes themselves (the
``compact`` step of :mod:`.layout_scripts`) and never read. A purge deletes a
host's hashes.

A field is the key without the part the hash already names: ``s`` or ``h``
for ``https://<host>`` or ``http://<host>``, then the rest (``/path``,
``:8080/path``, ``\\t...``); a key written otherwise is kept whole after
``=``. A hash of a host's few targets then fits Redis's compact encoding
(listpack: fields and values up to 64 bytes, up to 128 of them), about half
the memory of whole URLs.

Before this layout, each namespace was one hash, ``<prefix>:state:<namespace>``
(its *legacy* hash), never expiring. What is still there is read when the
new layout has nothing, deleted with what replaces it, and moved into the
new layout by the first worker to start (:meth:`RedisStateStore.upgrade
<scrapy_walsh_research.state.redis.store.RedisStateStore.upgrade>`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from scrapy_walsh_research.state.namespaces import BY_HOST, key_host, retention

if TYPE_CHECKING:
    from scrapy_walsh_research.state.redis.connection import RedisConnection

#: the field of a host's hash that holds its compaction's progress (no
#: encoded key starts with it)
MARK = "#"
#: ``<unix seconds> <JSON>``
_STAMPED = re.compile(r"(\d+) (.*)", re.S)
_AFTER_HOST = frozenset("/:?#\t")


def sharded(namespace: str) -> bool:
    """Whether *namespace* is kept per host (else one hash, kept as long as
    it is written: the adopted blocklist, the bundle's own secret)."""
    return namespace in BY_HOST


def bucket_host(key: str) -> str:
    """The host whose hash holds *key* (``""`` for a key with no URL)."""
    return key_host(key) or ""


def bucket(conn: RedisConnection, namespace: str, host: str) -> str:
    return conn.key("state", namespace, host)


def legacy(conn: RedisConnection, namespace: str) -> str:
    """The namespace's hash of the layout before this one."""
    return conn.key("state", namespace)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def field(key: str, host: str | None = None) -> str:
    """*key* as a field of its host's hash."""
    host = bucket_host(key) if host is None else host
    if host:
        name = _bracketed(host)
        for mark, scheme in (("s", "https://"), ("h", "http://")):
            head = scheme + name
            if key.startswith(head) and (len(key) == len(head) or key[len(head)] in _AFTER_HOST):
                return mark + key[len(head) :]
    return "=" + key


def key_of(name: str, host: str) -> str | None:
    """The key a field of *host*'s hash stands for (None: the mark)."""
    mark, rest = name[:1], name[1:]
    if mark == "s":
        return f"https://{_bracketed(host)}{rest}"
    if mark == "h":
        return f"http://{_bracketed(host)}{rest}"
    if mark == "=":
        return rest
    return None


def stamped(value: str, at: float) -> str:
    return f"{int(at)} {value}"


def unstamped(raw: str) -> tuple[float | None, str]:
    """(when it was written, the value); a value with no stamp (the legacy
    layout's) has None."""
    found = _STAMPED.fullmatch(raw)
    if found is None:
        return None, raw
    return float(found.group(1)), found.group(2)


def retention_of(conn: RedisConnection) -> dict[str, float]:
    """:func:`~scrapy_walsh_research.state.namespaces.retention` as the
    crawler of *conn* sets it (the defaults for a connection of no crawler)."""
    return retention(conn.settings)


def records_ttl(conn: RedisConnection) -> float:
    """``WALSH_RECORDS_TTL`` as the crawler of *conn* sets it (the default for
    a connection of no crawler)."""
    return conn.settings.records_ttl
