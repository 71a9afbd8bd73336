"""The fleet journal: what this worker last saw of the fleet's Redis, on disk.

Kept in ``WALSH_STATE_DIR`` so that a Redis that comes back empty or older
is noticed at start-up (:data:`~.scripts.HELLO`) by any worker that ran
before, whatever order the workers start in; and so that what this machine
holds is published again once per loss of the fleet's history, not at
every start (:meth:`FleetJournal.published`, :meth:`FleetJournal.publishing`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import IO, TYPE_CHECKING, Any

from scrapy_walsh_research.state.directory import machine_lock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

logger = logging.getLogger(__name__)


class FleetJournal:
    """What this worker last saw of the fleet's Redis (epoch, generation, and
    when Redis was last seen holding them, on Redis's clock), kept in its
    ``WALSH_STATE_DIR`` so that a Redis that comes back empty or older is
    noticed by any worker that ran before, whatever order the workers start
    in; the time tells a loss the fleet marked since from a new one (one
    mark per loss). Written at most once a second while the crawl runs and
    once at its end. It also names the loss of the fleet's history that this
    machine's workers last published again for (:meth:`published`), and
    holds the lock a worker publishing again holds (:meth:`publishing`).

    Workers started from one project on one machine share that directory
    (it defaults to the project's), so a write merges with the file under a
    lock (the highest generation of the epoch wins) and goes through a temp
    file of its own. A journal that cannot be written is logged, never
    raised: it must not stop a request whose slot is already reserved.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        saved = self._load()
        self.epoch, self.gen = str(saved.get("epoch") or ""), int(saved.get("gen") or 0)
        #: when Redis was last seen holding that epoch and generation, on
        #: Redis's clock (None: unknown, as in a journal of an older release)
        self.at: float | None = saved.get("at")
        self._written = self._view()
        self._flushed = 0.0
        self._warned = False

    def _view(self) -> tuple[str, int, float | None]:
        return self.epoch, self.gen, self.at

    def _load(self) -> dict[str, Any]:
        try:
            saved = json.loads(self.path.read_text())
            return {
                "epoch": str(saved.get("epoch") or ""),
                "gen": int(saved.get("gen") or 0),
                **({"at": float(saved["at"])} if saved.get("at") is not None else {}),
                **({"published": str(saved["published"])} if saved.get("published") else {}),
            }
        except (OSError, ValueError, TypeError, AttributeError):
            return {}

    def saw(self, epoch: str, gen: int, at: float | None = None) -> None:
        """Redis held *epoch* and at least generation *gen* at *at* (its
        clock): kept if it is the highest generation of the epoch, or the
        latest time that one was seen."""
        self._merge(epoch, gen, at)
        if time.monotonic() - self._flushed >= 1.0:
            self.flush()

    def _merge(self, epoch: str, gen: int, at: float | None) -> None:
        if epoch != self.epoch or gen > self.gen:
            self.epoch, self.gen, self.at = epoch, gen, at
        elif gen == self.gen and at is not None and (self.at is None or at > self.at):
            self.at = at

    def flush(self) -> None:
        if self._view() == self._written or not self.epoch:
            return

        def merge(saved: dict[str, Any]) -> dict[str, Any]:
            if saved.get("epoch") == self.epoch:
                self._merge(self.epoch, int(saved.get("gen") or 0), saved.get("at"))
            view = {"epoch": self.epoch, "gen": self.gen}
            rest = {k: v for k, v in saved.items() if k not in ("epoch", "gen", "at")}
            return {**rest, **view, **({"at": self.at} if self.at is not None else {})}

        if self._update(merge):
            self._written, self._flushed = self._view(), time.monotonic()

    def published(self, marker: str) -> bool:
        """Whether this machine's workers have published again what they
        hold for the loss *marker* (when the fleet's history was marked
        incomplete, as Redis keeps it)."""
        return self._load().get("published") == marker

    def note_published(self, marker: str) -> None:
        """Everything this machine holds is published again for *marker*:
        its later workers publish nothing for it. Noted only once it is (a
        worker killed while publishing leaves the loss to the next one)."""
        self._update(lambda saved: {**saved, "published": marker})

    @contextlib.contextmanager
    def publishing(self) -> Iterator[bool]:
        """Whether this worker may publish again for the machine now: True,
        holding the machine's publishing lock (``<journal>.publishing``)
        until the block ends; False while another worker of the machine
        holds it. The lock is the kernel's (``flock``), so a worker that
        dies while publishing, even by SIGKILL, releases it. Where it cannot
        be taken (no ``fcntl``, a directory that cannot be written): True,
        as publishing twice costs a message, never a record."""
        try:
            handle = open(self.path.with_name(self.path.name + ".publishing"), "a")
        except OSError:
            yield True
            return
        with handle:
            yield _try_lock(handle)

    def _update(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
        """Rewrite the file with *change* applied to what it holds, under the
        lock, through a temp file of this process's; False (logged once) if
        it cannot be written."""
        try:
            with machine_lock(self.path.with_name(self.path.name + ".lock")):
                saved = change(self._load())
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(saved))
                os.replace(tmp, self.path)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Cannot write the fleet journal %(path)s (%(exc)s): if Redis loses its "
                    "data, this worker will not notice it on its next start",
                    {"path": self.path, "exc": exc},
                )
            return False
        return True


def _try_lock(handle: IO[str]) -> bool:
    """Take an exclusive lock on *handle*'s file, without waiting: False if
    another process holds it (True where the platform has no ``fcntl``). It
    lasts until the handle is closed, or its process ends."""
    try:
        import fcntl
    except ImportError:  # Windows
        return True
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True
