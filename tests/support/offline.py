"""A machine without internet, for a crawl in a child process: the sandbox's
``*.test`` hosts resolve to the loopback origin, and every other name gets
the answer a lab's resolver gives it, "no such name" (``EAI_NONAME``), so
the default blocklist URL (``https://wal.sh/...``) does not resolve. Passed
as ``-s TWISTED_DNS_RESOLVER=tests.support.offline.OfflineDNSResolver``."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from scrapy_walsh_research.sandbox.origin import SandboxDNSResolver, SandboxResolver


class OfflineResolver(SandboxResolver):
    """The sandbox's resolver, with no internet behind it."""

    def lookup_error(self, name: str) -> int | None:
        said = super().lookup_error(name)
        if said is not None or name.lower().rstrip(".") == "localhost":
            return said
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return socket.EAI_NONAME
        return None  # an address: nothing to look up


class OfflineDNSResolver(SandboxDNSResolver):
    """``TWISTED_DNS_RESOLVER``: Scrapy's resolver, under :class:`OfflineResolver`."""

    def install_on_reactor(self) -> None:
        self.inner.install_on_reactor()
        reactor: Any = self.reactor
        reactor.installNameResolver(OfflineResolver(reactor.nameResolver))
