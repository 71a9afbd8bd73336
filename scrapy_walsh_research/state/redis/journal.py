"""The fleet journal: what this worker last saw of the fleet's Redis, on disk.

Kept in ``WALSH_STATE_DIR`` so that a Redis that comes back empty or older
is noticed at start-up (:data:`~.scripts.HELLO`) by any worker that ran
before, whatever order the workers start in.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

logger = logging.getLogger(__name__)


class FleetJournal:
    """What this worker last saw of the fleet's Redis (epoch, generation),
    kept in its ``WALSH_STATE_DIR`` so that a Redis that comes back empty or
    older is noticed by any worker that ran before, whatever order the
    workers start in. Written at most once a second while the crawl runs and
    once at its end.

    Workers started from one project on one machine share that directory
    (it defaults to the project's), so a write merges with the file under a
    lock (the highest generation of the epoch wins) and goes through a temp
    file of its own. A journal that cannot be written is logged, never
    raised: it must not stop a request whose slot is already reserved.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.epoch, self.gen = self._read()
        self._written = (self.epoch, self.gen)
        self._at = 0.0
        self._warned = False

    def _read(self) -> tuple[str, int]:
        try:
            saved = json.loads(self.path.read_text())
            return str(saved.get("epoch") or ""), int(saved.get("gen") or 0)
        except (OSError, ValueError, TypeError, AttributeError):
            return "", 0

    def saw(self, epoch: str, gen: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.gen = epoch, gen
        else:
            self.gen = max(self.gen, gen)
        if time.monotonic() - self._at >= 1.0:
            self.flush()

    def flush(self) -> None:
        if (self.epoch, self.gen) == self._written or not self.epoch:
            return
        try:
            with _locked(self.path.with_name(self.path.name + ".lock")):
                epoch, gen = self._read()
                if epoch == self.epoch:
                    self.gen = max(self.gen, gen)
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps({"epoch": self.epoch, "gen": self.gen}))
                os.replace(tmp, self.path)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "Cannot write the fleet journal %(path)s (%(exc)s): if Redis loses its "
                    "data, this worker will not notice it on its next start",
                    {"path": self.path, "exc": exc},
                )
            return
        self._written, self._at = (self.epoch, self.gen), time.monotonic()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between processes on this machine (none where the
    platform has no ``fcntl``: the per-process temp file still keeps writes whole)."""
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
