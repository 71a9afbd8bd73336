"""Keep the garbage collector's full passes off the reactor's critical path.

A full (generation 2) pass walks every tracked object, on the reactor thread
and holding the GIL. When the engine starts, the heap is ~90,000 tracked
objects (Scrapy, Twisted, jsonschema, settings, components), nearly all of
which live until the process exits; each full pass over them took 64-66 ms
(``bench/stall_bench.py``, timed with ``gc.callbacks``), a reactor stall over
the 50 ms bound at start-up and again mid-crawl. ``gc.freeze()`` at
``engine_started`` moves them to the permanent generation (O(1), 2.5 us), so
later passes walk only what the crawl itself allocates (~4,000 objects at the
end of the 400-page bench: no pass over 5 ms, worst lag 26 ms).

Memory: reference counting still frees every frozen object that is let go;
only reference cycles among objects that existed at engine start are never
collected, and those are the long-lived start-up heap. ``gc.unfreeze()`` at
``engine_stopped`` of the process's last running crawler hands them back,
so a process that runs crawls one after another (tests, a scheduler)
collects each crawl's leftovers as before; a crawler stopping while another
runs unfreezes nothing, and a freeze the process made itself before any
crawl started (gc.freeze() before os.fork(), as ``walsh-workers`` does) is
never undone by a crawl.
``WALSH_GC_FREEZE = False`` turns it off.
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_walsh_research._runtime.context import InContext

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from typing_extensions import Self

logger = logging.getLogger(__name__)


#: crawlers of this process between engine_started and engine_stopped
_running = 0
#: whether the permanent generation was empty when the first of them started
_ours = False


class HeapFreeze(InContext):
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        ext = cls(crawler)
        if not ext.context.settings.gc_freeze:
            raise NotConfigured
        crawler.signals.connect(ext.engine_started, signal=signals.engine_started)
        crawler.signals.connect(ext.engine_stopped, signal=signals.engine_stopped)
        return ext

    def engine_started(self) -> None:
        global _running, _ours
        if _running == 0:
            _ours = gc.get_freeze_count() == 0
        _running += 1
        gc.freeze()
        frozen = gc.get_freeze_count()
        assert self.crawler.stats is not None
        self.crawler.stats.set_value("walsh/gc/frozen", frozen)
        logger.debug("Start-up heap frozen: %(n)d objects out of the collector's passes",
                     {"n": frozen})  # fmt: skip

    def engine_stopped(self) -> None:
        global _running
        _running -= 1
        if _running == 0 and _ours:
            gc.unfreeze()
