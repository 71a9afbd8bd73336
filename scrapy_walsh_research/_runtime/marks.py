"""Which requests are the bundle's own, and which are declared targets.

Gates exempt some requests from some checks: the blocklist gate does not
wait for the blocklist to fetch the blocklist, the robots.txt gate does not
gate robots.txt, the scope gate (R6) lets through declared targets and the
bundle's own requests only. Such an exemption must not be something a
project can claim with one line of ``meta``: Scrapy copies ``meta`` to every
redirect hop and retry, and any spider or middleware can set any key.

So the bundle *marks* its requests: ``meta["walsh_internal"]`` holds a token
``purpose.nonce.mac`` whose HMAC-SHA256 is keyed by a secret kept in the
state store (one per ``WALSH_STATE_DIR``, or per fleet with
``WALSH_REDIS_URL``, so a request scheduled by one worker and sent by another
still verifies). A token that does not verify counts for nothing: the
request is gated like any other (``walsh/internal/forged``). Declared
targets get a ``target`` token from :class:`~scrapy_walsh_research.gates.scope.
ScopeSpiderMiddleware` as they leave the spider's ``start()``; Scrapy's
``is_start_request`` is not trusted.

A valid mark does travel to redirect hops and retries (they are the same
fetch); each gate still checks the hop itself (see the blocklist and
robots.txt gates).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from typing import TYPE_CHECKING

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http.request import NO_CALLBACK

from scrapy_walsh_research._runtime.meta import (
    BYTES_SEEN_META,
    INTERNAL_META,
    MAX_BYTES_META,
    MAX_WAIT_META,
    TARGET_META,
)
from scrapy_walsh_research.core.urls import canonical_url
from scrapy_walsh_research.state.namespaces import INTERNAL

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from scrapy_walsh_research.state import StateStore

logger = logging.getLogger(__name__)

TARGET = "target"
ROBOTS, BLOCKLIST, SCHEMA = "robots", "blocklist", "schema"
#: /.well-known/tdmrep.json (TDMRep), fetched once per origin like robots.txt
TDMREP = "tdmrep"
#: The /llms.txt probe (R9): scheduled like a target and subject to every gate.
LLMS = "llms"
#: a sitemap (or a sitemap index's child) the robots.txt of a target's origin
#: declares, fetched by the sitemaps gate through every gate, robots.txt's too
SITEMAP = "sitemap"
#: Fetched with engine.download_async from inside another request's chain,
#: and paced in place, since they cannot be requeued. robots.txt and the
#: operator's documents are not robots-gated; tdmrep.json and sitemaps are.
DIRECT = frozenset({ROBOTS, BLOCKLIST, SCHEMA, TDMREP, SITEMAP})
PURPOSES = frozenset({TARGET, LLMS, *DIRECT})
VERIFIED_CACHE = 4096
_SECRET_NAMESPACE = INTERNAL
_SECRET_KEY = "mark-secret"


class HostBusy(IgnoreRequest):
    """A direct request's host is not ready within the wait it may spend in
    place (it would hold the only download slot): try again at ``ready_in``."""

    def __init__(self, host: str, ready_in: float) -> None:
        super().__init__(f"{host} is not ready for {ready_in:.1f} s")
        self.host = host
        self.ready_in = ready_in


class Marks:
    """Issues and verifies the marks of the bundle's own requests for one
    crawler: HMAC tokens, not the requests' Web Bot Auth signatures
    (:mod:`scrapy_walsh_research.identity.signing`)."""

    def __init__(self, crawler: Crawler, store: Callable[[], StateStore]) -> None:
        self.crawler = crawler
        #: the crawler's state store, opened when first needed
        self._store = store
        self._cap_installed = False
        self._secret: bytes | None = None
        #: HMAC-SHA256 keyed by the secret, copied per token: keying it
        #: anew cost 0.6 µs of the 1.5 µs a MAC, three MACs a target
        self._keyed: hmac.HMAC | None = None
        self._forged_logged = False
        #: tokens verified lately: every gate asks about every request
        self._verified: dict[str, str] = {}

    async def ready(self) -> None:
        """Load (or create, once, atomically) the secret shared through the state store."""
        if self._secret is not None:
            return
        stored = await self._store().put_if_absent(
            _SECRET_NAMESPACE, _SECRET_KEY, secrets.token_hex(32)
        )
        self._secret = bytes.fromhex(stored)
        self._keyed = hmac.new(self._secret, digestmod=hashlib.sha256)

    def _mac(self, purpose: str, nonce: str) -> str:
        assert self._keyed is not None
        mac = self._keyed.copy()
        mac.update(f"{purpose}.{nonce}".encode())
        return mac.hexdigest()[:32]

    def issue(self, purpose: str) -> str:
        """A token for *purpose*; :meth:`ready` must have been awaited."""
        if self._secret is None:
            raise RuntimeError("Marks.issue() before Marks.ready()")
        nonce = secrets.token_hex(8)
        return f"{purpose}.{nonce}.{self._mac(purpose, nonce)}"

    def purpose(self, request: Request, *, quiet: bool = False) -> str | None:
        """The verified purpose of *request*, or None (unmarked or forged; a
        forged one is counted and logged unless *quiet*)."""
        token = request.meta.get(INTERNAL_META)
        if token is None:
            return None
        if isinstance(token, str) and self._secret is not None:
            known = self._verified.get(token)
            if known is not None:
                return known
            parts = token.split(".")
            if len(parts) == 3 and parts[0] in PURPOSES:
                if hmac.compare_digest(parts[2], self._mac(parts[0], parts[1])):
                    if len(self._verified) >= VERIFIED_CACHE:
                        self._verified.clear()
                    self._verified[token] = parts[0]
                    return parts[0]
        if not quiet:
            self._forged(request)
        return None

    def _forged(self, request: Request) -> None:
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value("walsh/internal/forged")
        if not self._forged_logged:
            self._forged_logged = True
            logger.warning(
                "A request carries meta[%(key)r]=%(value)r that the bundle did not sign: "
                "it gets no exemption and passes every gate (%(url)s). Only the bundle marks "
                "its own requests.",
                {
                    "key": INTERNAL_META,
                    "value": request.meta.get(INTERNAL_META),
                    "url": request.url,
                },
            )

    def is_target(self, request: Request) -> bool:
        """A declared target (or its redirect hop or retry)."""
        return self.purpose(request) == TARGET

    def is_direct(self, request: Request) -> bool:
        """robots.txt, the blocklist or its schema, fetched by the bundle itself."""
        return self.purpose(request) in DIRECT


def target_key(request: Request) -> str:
    """The canonical URL of the declared target a request stems from."""
    target = request.meta.get(TARGET_META)
    if isinstance(target, dict) and target.get("canonical_url"):
        return str(target["canonical_url"])
    first = (request.meta.get("redirect_urls") or [request.url])[0]
    return canonical_url(first)


async def internal_fetch(
    marks: Marks,
    url: str,
    purpose: str,
    *,
    max_bytes: int | None = None,
    maxsize: int | None = None,
    max_wait: float | None = None,
    timeout: float | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """Download *url* for the bundle itself; redirects are followed by Scrapy.

    With *max_bytes*, the body download is stopped soon after that many
    bytes (one network chunk more at most) and the partial response returned.
    With *maxsize*, a larger response is refused (Scrapy's ``download_maxsize``).
    With *max_wait*, the request may wait at most that long in place for its
    host's slot; beyond it, :class:`HostBusy` is raised and nothing is sent.
    With *timeout*, the answer is waited for at most that long (Scrapy's
    ``download_timeout``), if shorter than ``DOWNLOAD_TIMEOUT``. *headers*
    are sent too (a sitemap's conditional GET).
    """
    crawler = marks.crawler
    await marks.ready()
    meta: dict[str, object] = {INTERNAL_META: marks.issue(purpose), "dont_retry": True}
    if max_bytes is not None:
        meta[MAX_BYTES_META] = max_bytes
        _install_cap(marks)
    if maxsize is not None:
        meta["download_maxsize"] = maxsize
    if max_wait is not None:
        meta[MAX_WAIT_META] = max_wait
    if timeout is not None:
        meta["download_timeout"] = min(timeout, crawler.settings.getfloat("DOWNLOAD_TIMEOUT"))
    request = Request(url, callback=NO_CALLBACK, dont_filter=True, meta=meta, headers=headers)
    assert crawler.engine is not None
    return await crawler.engine.download_async(request)


def _install_cap(marks: Marks) -> None:
    """The byte cap of the bundle's own fetches, connected once per crawler."""
    if not marks._cap_installed:
        _connect_cap(marks.crawler)
        marks._cap_installed = True


def _connect_cap(crawler: Crawler) -> None:
    def on_bytes(data: bytes, request: Request, spider: object = None) -> None:
        cap = request.meta.get(MAX_BYTES_META)
        if cap is None:
            return
        seen = request.meta.get(BYTES_SEEN_META, 0) + len(data)
        request.meta[BYTES_SEEN_META] = seen
        if seen > cap:
            raise StopDownload(fail=False)

    crawler.signals.connect(on_bytes, signal=signals.bytes_received, weak=False)
