"""Host and URL normalisation shared by every gate.

Every gate keys on the *target* URL's host (never on a proxy's), normalised
the same way, so the blocklist, the robots cache and the pacing clocks agree
on what "one host" is.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit, urlunsplit

import idna

DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_host(host: str) -> str:
    """Lower-case, strip a trailing dot and any port, IDNA-encode (UTS #46).

    Returns ``""`` for an empty host. A host IDNA cannot encode (for example
    one with an underscore) is kept lower-cased rather than rejected: a
    blocklist entry must never be dropped because it is unusual.
    """
    host = host.strip()
    if host.startswith("[") and "]" in host:  # IPv6 literal, maybe with port
        return host[1 : host.index("]")].lower()
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    host = host.rstrip(".").lower()
    if not host:
        return ""
    if is_ip(host):
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError:
        return host


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def url_host(url: str) -> str:
    """The normalised host of *url* (``""`` when it has none)."""
    return normalize_host(urlsplit(url).hostname or "")


def origin_of(url: str) -> str:
    """``scheme://host:port``: the authority a robots.txt applies to (RFC 9309 §2.3)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or DEFAULT_PORTS.get(scheme, 0)
    host = url_host(url)
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def canonical_url(url: str) -> str:
    """Canonical form used for dedup and validators (spec R7).

    Drops the fragment and a trailing slash (keeping the root ``/``),
    lower-cases scheme and host, drops the default port. The query is kept
    as written: reordering it could merge distinct resources.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = url_host(url)
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    if parts.username:
        userinfo = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{userinfo}@{netloc}"
    path = parts.path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    return urlunsplit((scheme, netloc, path, parts.query, ""))


def is_http_url(text: str) -> bool:
    """True for an absolute http(s) URL with a host."""
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
