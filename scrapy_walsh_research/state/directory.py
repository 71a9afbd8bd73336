"""The state directory (``WALSH_STATE_DIR``): where this machine's state
lives, and this crawl's exclusive hold on it when nothing is shared."""

from __future__ import annotations

import contextlib
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrapy.utils.project import data_path

from scrapy_walsh_research.errors import WalshConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from scrapy.crawler import Crawler

    from scrapy_walsh_research.settings.walsh import WalshSettings


def state_dir(settings: WalshSettings) -> Path:
    """``WALSH_STATE_DIR``, by default ``.scrapy/walsh`` in the project data dir."""
    configured = settings.state_dir
    path = Path(configured) if configured else Path(data_path("walsh", createdir=True))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file there, no permission: a refusal, not a crash
        raise WalshConfigurationError(
            f"WALSH_STATE_DIR={str(path)!r} cannot be the state directory "
            f"({exc.strerror or exc}): set WALSH_STATE_DIR to a directory this crawl can "
            "create and write (the default is .scrapy/walsh in the project)."
        ) from None
    return path


#: the state dirs this process holds, and by which crawler: one whose crawl
#: never started (refused at start-up) or has ended gives its hold up
_held: dict[str, tuple[Any, weakref.ref[Crawler]]] = {}


def hold_state_dir(directory: Path, crawler: Crawler) -> Any:
    """This crawl's exclusive hold on *directory* (a lock file): without
    Redis, the host clocks in it are this process's alone, and two crawls
    sharing it would each keep 1 s between their own requests and send a
    host two requests milliseconds apart. The caller releases it (closes
    the handle) when the engine stops."""
    import fcntl  # here, not above: a Redis worker on a platform without it needs none

    key = str(directory.resolve())
    previous = _held.pop(key, None)
    if previous is not None:
        handle, holder = previous
        other = holder()
        if other is not None and other is not crawler and getattr(other, "crawling", False):
            _held[key] = previous  # a crawl of this process is using it: refused below
        else:
            handle.close()
    handle = open(directory / "crawl.lock", "a+")  # held for the crawl, closed when it stops
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise WalshConfigurationError(
            f"Another crawl (or walsh command) is using WALSH_STATE_DIR={directory}. Without "
            "WALSH_REDIS_URL each process paces only its own requests: run crawls on one "
            "state dir one at a time, or share politeness through Redis (WALSH_REDIS_URL)."
        ) from None
    _held[key] = (handle, weakref.ref(crawler))
    return handle


@contextlib.contextmanager
def machine_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on *path* between the processes of this machine,
    waited for (none where the platform has no ``fcntl``)."""
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
