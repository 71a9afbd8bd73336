"""A host name the resolver says does not exist is an answer, not an outage.

A document fetch that fails because its host name did not resolve says one
of two things. The resolver may have answered that the name does not exist
(``EAI_NONAME``: NXDOMAIN; ``EAI_NODATA``: no address for it): nothing will
change within the run, so the targets that need the host are decided at
once (a record, no request, tried again next run). Or it could not answer
for now (``EAI_AGAIN``, a timeout, a server failure): that passes, and the
targets wait for the document's next try as for any transient failure
(:mod:`scrapy_walsh_research.documents.waits`).

Twisted does not pass that difference on: both of its resolvers drop the
``socket.gaierror`` and its ``errno``, and the connection fails with a bare
``DNSLookupError`` ("no results for hostname lookup"), which Scrapy wraps in
``CannotResolveHostError``. So after such a failure the name is looked up
once more, to ask why, from the resolver that failed when it can say (the
sandbox's, through :meth:`lookup_error`) and otherwise from the system
resolver (``getaddrinfo`` in a thread), which is what Scrapy's resolvers
ask. A name that resolves on that second look failed for a reason that
passed: it is a wait, never an answer.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from scrapy.exceptions import CannotResolveHostError
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet import error as tx_error
from twisted.internet.threads import deferToThread

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext

    pass

logger = logging.getLogger(__name__)

#: the resolver's answers that a name has no address: it does not exist
#: (NXDOMAIN), or exists with no address record (``EAI_NODATA``, Linux)
NO_SUCH_NAME = frozenset(
    code for code in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) if code is not None
)
#: how long the second look may take (Scrapy's DNS_TIMEOUT when shorter)
LOOKUP_TIMEOUT = 30.0


@runtime_checkable
class ExplainsLookups(Protocol):
    """A name resolver that can say why a lookup fails (the sandbox's)."""

    def lookup_error(self, name: str) -> int | None:
        """The ``socket.EAI_*`` code a lookup of *name* fails with, 0 when
        it resolves, None when this resolver cannot say."""
        ...


@dataclass(frozen=True)
class Unresolved:
    """Why a host name did not resolve."""

    host: str
    #: the resolver answered that the name has no address: decided, not a wait
    no_such_name: bool
    #: what happened (``the host name x does not exist: DNS answered no
    #: such name``)
    text: str


def is_dns_failure(exc: BaseException) -> bool:
    """Whether *exc* is a download that failed because its host name did
    not resolve (Scrapy's wrapper, or Twisted's error as a handler raises it)."""
    return isinstance(exc, (CannotResolveHostError, tx_error.DNSLookupError)) or isinstance(
        exc.__cause__, tx_error.DNSLookupError
    )


def _system_lookup(host: str) -> int:
    """The system resolver's ``EAI_*`` code for *host* (0: it resolves);
    run in a thread."""
    try:
        socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        return exc.errno if isinstance(exc.errno, int) else socket.EAI_FAIL
    except (OSError, UnicodeError):
        return socket.EAI_FAIL
    return 0


class NameLookups:
    """Asks why a host name did not resolve, once per failed fetch."""

    def __init__(self, context: CrawlContext) -> None:
        crawler = context.crawler
        self.stats = crawler.stats
        self.timeout = min(LOOKUP_TIMEOUT, crawler.settings.getfloat("DNS_TIMEOUT", 60.0))

    async def why(self, host: str, exc: BaseException) -> Unresolved | None:
        """Why *host* did not resolve when a fetch failed with *exc*; None
        when *exc* is no DNS failure."""
        if not is_dns_failure(exc):
            return None
        code = await self._lookup(host)
        assert self.stats is not None
        if code in NO_SUCH_NAME:
            self.stats.inc_value("walsh/dns/no_such_name")
            return Unresolved(
                host, True, f"the host name {host} does not exist: DNS answered no such name"
            )
        self.stats.inc_value("walsh/dns/temporary")
        if code is None:
            text = f"the host name {host} could not be resolved: no DNS answer in time"
        elif code == 0:
            text = f"the host name {host} could not be resolved, then did"
        else:
            text = f"the host name {host} could not be resolved for now: {_gai_text(code)}"
        return Unresolved(host, False, text)

    async def _lookup(self, host: str) -> int | None:
        """The ``EAI_*`` code a lookup of *host* gets now (0: it resolves;
        None: no answer within the timeout)."""
        from twisted.internet import reactor  # the running one (importing installs one)

        resolver = getattr(reactor, "nameResolver", None)
        if isinstance(resolver, ExplainsLookups):
            said = resolver.lookup_error(host)
            if said is not None:
                return said
        deferred = deferToThread(_system_lookup, host)
        deferred.addTimeout(self.timeout, reactor)
        try:
            return await maybe_deferred_to_future(deferred)
        except Exception as exc:
            logger.debug("looking up %(host)s again: %(exc)r", {"host": host, "exc": exc})
            return None


def _gai_text(code: int) -> str:
    """The resolver's error *code* in words (Python has no ``gai_strerror``)."""
    if code == socket.EAI_AGAIN:
        return "temporary failure in name resolution"
    if code == socket.EAI_FAIL:
        return "non-recoverable failure in name resolution"
    return f"resolver error {code}"
