"""The list in force, and its keeping: adopt, persist, restore, purge.

A version is put in force in one step. It is persisted in the state store
(the document as a blob, then the small record naming it) and, with Redis,
in this worker's own store too: a Redis that loses its data must not
un-block an opt-out this worker knew. A run starts from the list kept
before, validated again; when a list was adopted before and no valid copy
is left, every target is denied until one is adopted again (a lost opt-out
is not "new"). What was stored about a host a list opts out is purged, once
per list and set of local entries. A run that waited out a first list that
never answered says so here, so the runs after it do not wait again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from scrapy_walsh_research.core.blocklist.document import BlocklistError
from scrapy_walsh_research.documents.waits import DocumentWaits
from scrapy_walsh_research.evidence.purge import purge

if TYPE_CHECKING:
    from scrapy_walsh_research._runtime.context import CrawlContext
    from scrapy_walsh_research.core.blocklist.entries import DomainSet
    from scrapy_walsh_research.core.outage import Outage
    from scrapy_walsh_research.documents.blocklist.build import Adopted, ListBuilder
    from scrapy_walsh_research.state import StateStore

logger = logging.getLogger(__name__)

STATE_NAMESPACE = "blocklist"
#: the list (and local entries) whose opted-out hosts were last purged
PURGED_KEY = "purged_for"
PURGED_EXTRA_KEY = "purged_extra_for"
STATE_KEY = "adopted"
#: kept once a list was adopted: from then on "no list" means lost, not new
EVER_KEY = "adopted_before"
#: kept once a run waited WALSH_POLICY_WAIT for a list never adopted and went
#: on without it: the URL, when, and what its last try said. Later runs fail
#: open on that URL's first failure at once (spec §5.2), without that wait
WAITED_OUT_KEY = "first_wait_over"
#: a list replaced that has more entries is freed in a thread
LARGE_LIST = 5_000
#: how long a target waits for another worker to publish again a list that
#: Redis lost, before it is denied: two heartbeats, within which every live
#: worker has seen the loss
RECOVERY_WAIT = 10.0
#: a stored fetch time this far ahead of our clock means a clock was wrong
CLOCK_TOLERANCE = 5.0


def blob_name(sha256: str) -> str:
    """Where the state store keeps the document of the version *sha256*."""
    return f"blocklist-{sha256}.json"


def _release(doomed: list[Adopted]) -> None:
    """Free a replaced list a little at a time (in a thread): freeing 10^6
    entries at once is one C call that holds the GIL for ~0.3 s. Only what
    belonged to that version alone is emptied (the caller checks the new
    version shares none of it); the local entries chained to it are not. A
    list read into an index file is let go here too: unmapping its file (and
    so deleting it) cost the reactor 0.1 s."""
    (old,) = doomed
    doomed.clear()
    blocked = old.document.get("blocked")
    while isinstance(blocked, list) and blocked:
        del blocked[-2000:]
    old.domains.release()


async def _write_copy(store: StateStore, copy: dict[str, Any], canonical: bytes) -> None:
    """Keep *copy* (the record naming a version) and its document in *store*:
    the blob first, then the record, then the blob of the version it
    replaces, so a crash at any point leaves a record whose blob exists."""
    blob = str(copy["blob"])
    previous = await store.get(STATE_NAMESPACE, STATE_KEY)
    if not isinstance(previous, dict) or previous.get("blob") != blob:
        await store.put_blob(blob, canonical)
    await store.put_many(STATE_NAMESPACE, {STATE_KEY: copy, EVER_KEY: {"at": copy["fetched_at"]}})
    if isinstance(previous, dict) and previous.get("blob") not in (None, blob):
        await store.delete_blob(str(previous["blob"]))


async def carry_adopted(source: StateStore, target: StateStore) -> tuple[str, float | None]:
    """Put the list *source* keeps into *target* (a single crawl's state into a
    fleet's), as a worker publishes its own copy again, unless *target* keeps
    one fetched as late: ("carried", "kept" (the target's is as new), "none" or
    "damaged", and the fetch time of the copy in *source*). Its bytes are
    checked against their sha256 here; every worker validates a stored copy
    against the schema before adopting it."""
    saved = await source.get(STATE_NAMESPACE, STATE_KEY)
    if not isinstance(saved, dict) or "blob" not in saved:
        return "none", None
    try:
        fetched_at = float(saved["fetched_at"])
    except (KeyError, TypeError, ValueError):
        return "damaged", None
    theirs = await target.get(STATE_NAMESPACE, STATE_KEY)
    if isinstance(theirs, dict) and isinstance(theirs.get("fetched_at"), (int, float)):
        if float(theirs["fetched_at"]) >= fetched_at:
            return "kept", fetched_at
    data = await source.get_blob(str(saved["blob"]))
    if data is None or hashlib.sha256(data).hexdigest() != saved.get("sha256"):
        return "damaged", fetched_at
    await _write_copy(target, dict(saved), data)
    return "carried", fetched_at


async def purge_again(store: StateStore) -> None:
    """State was carried into *store* since its list in force last purged what
    it opts out: the next crawl to put a list in force purges again."""
    await store.delete_many(STATE_NAMESPACE, [PURGED_KEY, PURGED_EXTRA_KEY])


class HeldList:
    """The list in force (with the local entries) and its copies in the state
    stores. The gate reads :attr:`domains` and :attr:`lost`; the refresh
    reads and sets :attr:`next_check`."""

    def __init__(
        self, context: CrawlContext, *, url: str, extra: DomainSet, builder: ListBuilder
    ) -> None:
        crawler = self.crawler = context.crawler
        self.audit = context.audit
        self.waits = context.service(DocumentWaits)
        self.stats = crawler.stats
        #: WALSH_BLOCKLIST_URL: a list kept from another URL is re-fetched at once
        self.url = url
        #: WALSH_BLOCKLIST_EXTRA, in force whether or not a list is adopted
        self.extra = extra
        self.builder = builder
        self.adopted: Adopted | None = None
        #: what R3 checks: the adopted entries and the local ones
        self.domains = extra
        #: why every target is denied: a list was adopted before, none is left
        #: (or, with Redis, none is left and no one can tell whether one was)
        self.lost: str | None = None
        #: until when (monotonic) a target waits for another worker to publish
        #: the list again before that denial is made
        self.recover_until = 0.0
        #: when (state-store time) the list is fetched next: its refresh after
        #: its fetch, or the next try after a failure
        self.next_check = 0.0
        #: why no list is in force for now (failed fetches while none was
        #: adopted, or while the one adopted is lost): targets wait for the
        #: next try (:class:`~scrapy_walsh_research.documents.waits.DocumentWaits`)
        self.outage: Outage | None = None
        self.store = context.store
        self.audit.blocklist_in_force(self.version)
        #: with Redis, this worker's own copy of the list in force: a Redis that
        #: loses its data must not un-block an opt-out this worker knew
        self.local = context.local_store
        self.store.on_history_lost(self.publish_again)

    def version(self) -> dict[str, Any] | None:
        """The list in force, as the audit log names it."""
        if self.adopted is None:
            return None
        return {"updated": self.adopted.document.get("updated"), "sha256": self.adopted.sha256}

    def mark_lost(self, why: str, *, wait_for_fleet: bool) -> None:
        """Deny every target (*why*) until a list is adopted; with
        *wait_for_fleet*, a target first waits a while for another worker to
        publish its copy."""
        self.lost = why
        if wait_for_fleet:
            self.recover_until = time.monotonic() + RECOVERY_WAIT

    # -- a first list that never answered ------------------------------------------

    async def first_wait_over(self) -> dict[str, Any] | None:
        """When a run waited out a first list from this URL that never
        answered (``at``, state-store time; ``why``: what its last try
        said), or None. Only while no list was ever adopted: a list adopted
        since makes "no list" lost, never new (:meth:`restore`)."""
        if self.adopted is not None or self.lost is not None:
            return None
        if not await self.store.history_complete():
            return None  # a fleet that may have lost an adopted list never fails open
        noted = await self.store.get(STATE_NAMESPACE, WAITED_OUT_KEY)
        if not isinstance(noted, dict) or noted.get("url") != self.url:
            return None  # none, or for another URL: a new URL gets its own first wait
        if not isinstance(noted.get("at"), (int, float)):
            return None
        return noted

    async def note_first_wait_over(self, outage: Outage) -> None:
        """A run waited for the first list (*outage*: since its first
        failure) and goes on without it: the runs after it do not wait for
        it again."""
        now = self.store.time()
        await self.store.put(
            STATE_NAMESPACE, WAITED_OUT_KEY,
            {"url": self.url, "at": now, "since": outage.since, "why": outage.describe()},
        )  # fmt: skip

    # -- adopt ----------------------------------------------------------------

    async def adopt(self, adopted: Adopted, *, persist: bool, canonical: bytes) -> None:
        """Put *adopted* in force (one step), and keep it with *canonical*,
        the bytes its sha256 is of."""
        # The list replaced is let go in a thread: freeing 10^6 entries takes
        # ~0.3 s, which would be a reactor stall here.
        old = self.adopted
        self.adopted = adopted
        self.lost = None
        self.domains = adopted.in_force or adopted.domains.union(self.extra)
        if self.outage is not None:
            self.outage = None
            await self.waits.known("blocklist", self.url)
        if (
            old is not None
            and len(old.domains) > LARGE_LIST
            and not old.domains.shares_entries_with(adopted.domains)
            and old.document is not adopted.document
        ):
            deferToThread(_release, [old])
        del old
        self.stats.set_value("walsh/blocklist/entries", len(self.domains))
        self._schedule_after(adopted)
        if persist:
            await self.persist(self.store, adopted, canonical)
        if self.local is not self.store:
            local = await self.local.get(STATE_NAMESPACE, STATE_KEY)
            if (
                not isinstance(local, dict)
                or local.get("sha256") != adopted.sha256
                or local.get("fetched_at") != adopted.fetched_at
            ):
                await self.persist(self.local, adopted, canonical)
        await self._purge_opted_out(adopted)

    def _schedule_after(self, adopted: Adopted) -> None:
        """The next fetch of the version just put in force: its refresh
        duration after its fetch time."""
        now = self.store.time()
        if adopted.url != self.url:
            self.next_check = 0.0  # a list persisted from another URL: kept, re-fetched at once
        elif adopted.fetched_at > now + CLOCK_TOLERANCE:
            # Fetched "in the future": a clock was wrong (this machine's
            # earlier, or another worker's). Its age is unknown: due now.
            self.stats.inc_value("walsh/blocklist/future_fetch_time")
            logger.warning(
                "The adopted blocklist's fetch time is %(s).0f s in the future (clock skew): "
                "refreshing it now rather than trusting its age.",
                {"s": adopted.fetched_at - now},
            )
            self.next_check = 0.0
        else:
            self.next_check = adopted.fetched_at + adopted.refresh

    async def persist(self, store: StateStore, adopted: Adopted, canonical: bytes) -> None:
        """The document as a blob (written off the reactor), then the small
        record naming it; the blob of the version it replaces goes last, so a
        crash at any point leaves a record whose blob exists."""
        blob = blob_name(adopted.sha256)
        copy = {"url": adopted.url, "fetched_at": adopted.fetched_at, "sha256": adopted.sha256,
                "blob": blob}  # fmt: skip
        await _write_copy(store, copy, canonical)

    # -- purge ----------------------------------------------------------------

    def _extra_digest(self) -> str:
        """Which local entries are in force (not how many: swapping one entry
        for another is a new opt-out)."""
        names = json.dumps(sorted(self.extra.entries)).encode()
        return hashlib.sha256(names).hexdigest()[:16]

    async def purge_extra(self) -> None:
        """The local entries opt hosts out whether or not a list is ever
        adopted (a first run whose fetch fails crawls with them alone): what
        was stored about those hosts goes, once per set of entries."""
        if not len(self.extra):
            return
        done_for = self._extra_digest()
        if await self.store.get(STATE_NAMESPACE, PURGED_EXTRA_KEY) == done_for:
            return
        extra = self.extra

        def cause(host: str) -> str:
            found = extra.match(host)
            return (
                f"opted out: blocklist entry {found[0] if found else '?'!r} (WALSH_BLOCKLIST_EXTRA)"
            )

        await purge(
            self.store, lambda host: extra.match(host) is not None, cause=cause,
            audit=self.audit, stats=self.stats,
        )  # fmt: skip
        await self.store.put(STATE_NAMESPACE, PURGED_EXTRA_KEY, done_for)

    async def _purge_opted_out(self, adopted: Adopted) -> None:
        """Delete what was stored about every host the list in force blocks,
        once per list (and set of local entries)."""
        done_for = f"{adopted.sha256}+{self._extra_digest()}"
        if await self.store.get(STATE_NAMESPACE, PURGED_KEY) == done_for:
            return
        domains = self.domains
        version = f"updated {adopted.document.get('updated')}, sha256 {adopted.sha256[:12]}"

        def cause(host: str) -> str:
            found = domains.match(host)
            entry, source = (found[0], found[1].get("reason")) if found else ("?", None)
            where = "WALSH_BLOCKLIST_EXTRA" if source == "WALSH_BLOCKLIST_EXTRA" else version
            return f"opted out: blocklist entry {entry!r} adopted ({where})"

        await purge(
            self.store, lambda host: domains.match(host) is not None, cause=cause,
            audit=self.audit, stats=self.stats,
        )  # fmt: skip
        await self.store.put(STATE_NAMESPACE, PURGED_KEY, done_for)

    # -- restore --------------------------------------------------------------

    async def stored(
        self, store: StateStore, *, quiet: bool = False
    ) -> tuple[Adopted, bytes] | None:
        """The list kept in *store*, validated like a fetched one, and its
        bytes; None if there is none or it does not validate (it is then
        never adopted). Bytes whose sha256 is the list in force's are that
        list (validated when it was adopted): only its fetch time is new."""
        saved = await store.get(STATE_NAMESPACE, STATE_KEY)
        if not saved:
            return None
        try:
            url, fetched_at = str(saved.get("url")), float(saved.get("fetched_at", 0.0))
            if isinstance(saved, dict) and "blob" in saved:
                data = await store.get_blob(str(saved["blob"]))
                if data is None:
                    raise BlocklistError(f"its document {saved['blob']!r} is missing")
                digest = await maybe_deferred_to_future(
                    deferToThread(lambda: hashlib.sha256(data).hexdigest())
                )
                if digest != saved.get("sha256"):
                    raise BlocklistError("its document does not match its recorded sha256")
                current = self.adopted
                if current is not None and current.sha256 == digest and current.url == url:
                    return dataclasses.replace(current, fetched_at=fetched_at), data
                document: Any = data
            else:  # a copy kept inline (before blobs)
                document = saved.get("document")
            return await self.builder.parse_off_reactor(document, url=url, fetched_at=fetched_at)
        except (BlocklistError, TypeError, ValueError, AttributeError) as exc:
            if quiet:
                return None
            self.stats.inc_value("walsh/blocklist/stored_rejected")
            logger.error(
                "The stored blocklist (from %(url)s) does not validate (%(exc)s): not restored.",
                {"url": saved.get("url") if isinstance(saved, dict) else None, "exc": exc},
            )
            return None

    async def publish_again(self) -> None:
        """Redis lost or rolled back the fleet's history: put this worker's
        copy of the list in force back, unless the shared one is as new."""
        own = await self.stored(self.local, quiet=True)
        if own is None:
            return
        shared = await self.stored(self.store, quiet=True)
        if shared is not None and shared[0].fetched_at >= own[0].fetched_at:
            return
        adopted, canonical = own
        await self.persist(self.store, adopted, canonical)
        self.stats.inc_value("walsh/blocklist/published_again")
        logger.warning(
            "Blocklist: Redis lost the fleet's copy; published this worker's again "
            "(%(n)d entries, fetched %(t)s).",
            {"n": len(adopted.domains), "t": time.ctime(adopted.fetched_at)},
        )

    async def restore(self) -> None:
        """The list adopted by an earlier run (or another process), before any
        request: the newer valid one of the shared copy and this worker's own.
        When neither is left but a list was adopted before, every target is
        denied until a list is adopted again (a lost opt-out is not "new")."""
        shared = await self.stored(self.store)
        own = await self.stored(self.local) if self.local is not self.store else None
        candidates = [found for found in (shared, own) if found is not None]
        if not candidates:
            for store in {id(s): s for s in (self.store, self.local)}.values():
                if await store.get(STATE_NAMESPACE, EVER_KEY):
                    self.stats.inc_value("walsh/blocklist/lost")
                    self.mark_lost(
                        "a blocklist was adopted before but no valid copy is left (the state was "
                        "lost or damaged): no host is contacted until the list is fetched again",
                        # another worker may publish it again
                        wait_for_fleet=self.local is not self.store,
                    )
                    logger.error("Blocklist: %(why)s.", {"why": self.lost})
                    return
            return
        stored, data = max(candidates, key=lambda found: found[0].fetched_at)
        # republish this worker's copy when the shared one is gone or older
        await self.adopt(stored, persist=shared is None or stored is not shared[0], canonical=data)
        logger.info(
            "Blocklist restored from state: %(n)d entries fetched from %(url)s at %(t)s",
            {"n": len(self.domains), "url": stored.url, "t": time.ctime(stored.fetched_at)},
        )
        # the documents read (up to ~80 MB each) are freed in a thread
        large = [shared, own, candidates, data]
        del shared, own, candidates, data
        deferToThread(large.clear)
