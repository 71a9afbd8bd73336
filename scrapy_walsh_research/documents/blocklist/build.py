"""One blocklist version, built from a document: read, validated, indexed.

Everything about a version is computed before it is adopted (JSON, the
contract's outline, both schemas, ``refresh``, the entries), so that
adopting it is one step that cannot fail. A small document is built inline.
A large one is built off the reactor: bytes in a child process
(:mod:`scrapy_walsh_research.core.blocklist.child`) whose index file is
mapped, not rebuilt; a document already parsed, in a thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from scrapy_walsh_research.core.blocklist.document import (
    INLINE_PARSE_BYTES,
    BlocklistError,
    check_shape,
    load_json,
    refresh_seconds,
)
from scrapy_walsh_research.core.blocklist.entries import DomainSet
from scrapy_walsh_research.core.blocklist.index import IndexFile
from scrapy_walsh_research.core.contract import BLOCKLIST_CONTRACT

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from scrapy_walsh_research.documents.blocklist.schema import BlocklistSchema

logger = logging.getLogger(__name__)

#: a child that takes longer than this is given up (the list in force stays)
CHILD_TIMEOUT = 600.0
#: the module the child process runs; it imports only the pure core
CHILD_MODULE = "scrapy_walsh_research.core.blocklist.child"
CHILD_CODE = f"from {CHILD_MODULE} import main; main()"


class ChildFailed(Exception):
    """The child process ended without an answer (not: the list is bad)."""


@dataclass(frozen=True)
class Adopted:
    """One blocklist version, with everything derived from it computed up
    front: adopting it then changes state in one step that cannot fail."""

    url: str
    document: dict[str, Any]
    fetched_at: float
    refresh: float
    domains: DomainSet
    sha256: str
    #: the fetched entries plus WALSH_BLOCKLIST_EXTRA: what R3 checks
    in_force: DomainSet | None = None
    #: why ``refresh`` was clamped, if it was (logged on the reactor thread)
    clamped: str | None = None


class ListBuilder:
    """Builds an :class:`Adopted` version from a document, or raises
    :class:`BlocklistError`; it changes no state of the gate (it may run in
    a thread), the published schema dropped when it cannot be applied
    aside."""

    def __init__(
        self,
        stats: StatsCollector,
        schema: BlocklistSchema,
        extra: DomainSet,
        *,
        min_refresh: float,
        max_refresh: float,
    ) -> None:
        self.stats = stats
        self.schema = schema
        self.extra = extra
        self.min_refresh = min_refresh
        self.max_refresh = max_refresh

    def parse(self, data: bytes | Any, *, url: str, fetched_at: float) -> Adopted:
        """Everything about one document, or :class:`BlocklistError`: JSON, the
        contract's shape, the published schema (formats checked), ``refresh``,
        the entries. Nothing is changed until all of it has succeeded."""
        adopted, _ = self._build(data, url=url, fetched_at=fetched_at)
        self._note_clamped(adopted)
        return adopted

    async def parse_off_reactor(
        self, data: bytes | Any, *, url: str, fetched_at: float
    ) -> tuple[Adopted, bytes]:
        """:meth:`parse`, off the reactor when the document is large; also
        returns the bytes to persist. The result is swapped in by the held
        list's ``adopt`` in one step.

        Large bytes are read, validated and indexed in a child process
        (:meth:`_build_in_child`): in a thread, the pure-Python work of a
        10^6-entry list held the GIL long enough to stall the reactor for
        0.1-0.4 s at a time, and its 10^6 entries cost the crawl process
        hundreds of MB."""
        size = len(data) if isinstance(data, bytes) else len(data.get("blocked") or ()) * 64
        if size <= INLINE_PARSE_BYTES:
            adopted, canonical = self._build(data, url=url, fetched_at=fetched_at)
        elif isinstance(data, bytes):
            adopted, canonical = await maybe_deferred_to_future(
                deferToThread(self._build_in_child, data, url=url, fetched_at=fetched_at)
            )
        else:  # a document already decoded (a copy kept inline): in a thread
            adopted, canonical = await maybe_deferred_to_future(
                deferToThread(self._build, data, url=url, fetched_at=fetched_at)
            )
        self._note_clamped(adopted)
        return adopted, canonical

    def _build_in_child(self, data: bytes, *, url: str, fetched_at: float) -> tuple[Adopted, bytes]:
        """:meth:`_build` for large bytes, run in a thread that only waits on a
        child process (see :mod:`~scrapy_walsh_research.core.blocklist.child`);
        the entries come back as an index file, mapped (:class:`IndexFile`),
        not rebuilt. A child that fails without an answer (it could not
        start, was killed) is not a verdict on the list: the document is then
        built in this thread, as before, so the list is still checked and
        adopted."""
        fd, body_path = tempfile.mkstemp(prefix="walsh-blocklist-", suffix=".json")
        index_path = body_path[: -len(".json")] + ".index"
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            try:
                answer = self._run_child(body_path, index_path, url)
            except (OSError, ValueError, subprocess.SubprocessError, ChildFailed) as exc:
                self.stats.inc_value("walsh/blocklist/child_failed")
                logger.warning(
                    "The blocklist could not be read in a child process (%(exc)s); reading "
                    "it in a thread instead (the reactor may stall meanwhile).",
                    {"exc": exc},
                )
                return self._build(data, url=url, fetched_at=fetched_at)
            for level, line in answer["log"]:
                logger.log(level, "%s", line)
            if answer["log_dropped"]:
                logger.warning(
                    "... and %(n)d more lines about blocklist entries (%(url)s)",
                    {"n": answer["log_dropped"], "url": url},
                )
            if not answer["ok"]:
                raise BlocklistError(answer["error"])
            if answer["unusable"] is not None:
                self.schema.published_unusable(answer["unusable"])
            domains = DomainSet.from_index(IndexFile(index_path))
        finally:
            for path in (body_path, index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)  # an open index stays mapped
        self.stats.inc_value("walsh/blocklist/built_in_child")
        digest = hashlib.sha256(data).hexdigest()
        adopted = Adopted(url, answer["header"], float(fetched_at), answer["refresh"], domains,
                          digest, in_force=domains.union(self.extra),
                          clamped=answer["clamped"])  # fmt: skip
        return adopted, data

    def _run_child(self, body_path: str, index_path: str, url: str) -> dict[str, Any]:
        """The child's answer about the document at *body_path*, its entries
        written to *index_path*; :class:`ChildFailed` (or an OS or JSON
        error) when it gave none."""
        schema = self.schema
        request = {
            "body": body_path, "index": index_path, "url": url,
            "contract_name": BLOCKLIST_CONTRACT, "contract": schema.contract.schema,
            "schema_url": schema.url, "min_refresh": self.min_refresh,
            "max_refresh": self.max_refresh,
            "published": None if schema.published is None else schema.published.schema,
        }  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        if not sys.executable:
            raise ChildFailed("no Python executable to start")
        done = subprocess.run(
            [sys.executable, "-c", CHILD_CODE], input=json.dumps(request).encode(),
            capture_output=True, env=env, timeout=CHILD_TIMEOUT, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not done.stdout:
            tail = done.stderr.decode(errors="replace").strip()[-500:]
            raise ChildFailed(f"exit status {done.returncode}: {tail}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def _note_clamped(self, adopted: Adopted) -> None:
        if adopted.clamped:
            self.stats.inc_value("walsh/blocklist/refresh_clamped")
            logger.warning(
                "Blocklist from %(url)s: %(why)s; using %(s).0f s",
                {"url": adopted.url, "why": adopted.clamped, "s": adopted.refresh},
            )

    def _build(self, data: bytes | Any, *, url: str, fetched_at: float) -> tuple[Adopted, bytes]:
        """The work of :meth:`parse`, touching no shared state (it may run in
        a thread): the adopted version and the bytes it is identified by (as
        fetched; its ``sha256`` is the version's, what ``sha256sum`` of the
        published file prints) and kept as."""
        if isinstance(data, bytes):
            raw = data
            document = load_json(data)
        else:  # a copy kept inline (before blobs), or a test's document
            document = data
            raw = json.dumps(document, sort_keys=True).encode()
        check_shape(document, BLOCKLIST_CONTRACT)
        self.schema.validate(document)
        refresh, clamped = refresh_seconds(document.get("refresh"), self.min_refresh,
                                           self.max_refresh)  # fmt: skip
        digest = hashlib.sha256(raw).hexdigest()
        domains = DomainSet.from_entries(document["blocked"], source=url)
        adopted = Adopted(url, document, float(fetched_at), refresh, domains, digest,
                          in_force=domains.union(self.extra), clamped=clamped)  # fmt: skip
        return adopted, raw
