"""What a request's departure writes, besides its wire stamp: its audit
entry, durable before it leaves, and, with ``WALSH_SIGNING_KEY`` set, its
signature (:mod:`scrapy_walsh_research.identity.signing`).

The wire-timed download handler
(:mod:`~scrapy_walsh_research.scheduling.wire`) calls it as each request
goes onto its connection, after any pacing wait, so the audit entry and the
signature's ``created`` say when the request went out, and every hop and
retry gets its own. A request that cannot be signed is not sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest

from scrapy_walsh_research.identity.signing import SIGNATURE_HEADERS
from scrapy_walsh_research.settings.signing import request_signer

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from scrapy import Request

    from scrapy_walsh_research._runtime.context import CrawlContext


class SigningFailed(IgnoreRequest):
    """Signing is on and this request could not be signed: it is not sent
    (fail closed) and its line is recorded ``failed`` with the reason."""


class Departure:
    """The audit entry and the signature of each request as it leaves."""

    def __init__(self, context: CrawlContext) -> None:
        self._stats = context.crawler.stats
        self._signer = request_signer(context.crawler.settings)
        self._audit = context.audit
        self._audit.signing_keyid(self._signer.keyid if self._signer is not None else None)
        self._marks = context.marks

    @property
    def signs(self) -> bool:
        """Whether each request is signed (``WALSH_SIGNING_KEY`` is set)."""
        return self._signer is not None

    def logged(self, request: Request) -> Awaitable[None] | None:
        """Write *request*'s audit entry: a coroutine to await before the
        request leaves when the write waits on a store, else None."""
        return self._audit.sent(request, self._kind(request))

    def _kind(self, request: Request) -> str:
        """What the audit log calls this request: the bundle's own (robots,
        blocklist, schema, llms), a target, a redirect hop or a retry."""
        purpose = self._marks.purpose(request, quiet=True) or "other"
        if request.meta.get("retry_times"):
            return f"{purpose} retry"
        if request.meta.get("redirect_times"):
            return f"{purpose} hop"
        return purpose

    def sign(self, tx_request: Any, request: Request) -> None:
        """Sign *request* onto *tx_request* (the request the connection is
        about to write), replacing any ``Signature*`` headers it carried;
        :class:`SigningFailed` when it cannot be signed."""
        signer = self._signer
        assert signer is not None
        headers: dict[str, str] = {}
        try:
            signer.sign_request(tx_request.method.decode("ascii"), request.url, headers)
        except Exception as exc:
            self._stats.inc_value("walsh/signing/failed")
            raise SigningFailed(
                f"not sent: signing is on (WALSH_SIGNING_KEY) and {request.url} could not "
                f"be signed ({type(exc).__name__}: {exc})"
            ) from exc
        for name in SIGNATURE_HEADERS:
            tx_request.headers.removeHeader(name)
        for name, value in headers.items():
            tx_request.headers.setRawHeaders(name, [value])
        self._stats.inc_value("walsh/signing/signed")
