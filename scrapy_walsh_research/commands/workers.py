"""``scrapy walsh-workers N``: a fleet of N workers on one Redis feed, forked
from one process that has already imported them.

``scrapy crawl targets -a redis_key=...`` started N times pays Python's
start-up N times (about 1.2 s of CPU each for Scrapy, Twisted, jsonschema and
the bundle): on 2 cores, four workers spent seconds importing before the first
request. Here the parent imports the spider and every component a worker
loads, installs no reactor and starts no thread, then forks; each child
installs its own reactor and runs the spider, sharing the imported modules'
pages with its siblings. The parent only supervises: it forwards SIGINT and
SIGTERM (first graceful, second forced, as for one crawl), reaps the
workers, logs how each ended and exits non-zero if any failed.

Workers share the project's state directory as ``scrapy crawl`` workers
started side by side do (with Redis it holds only per-machine copies written
through per-process temp files under a lock, see
:class:`~scrapy_walsh_research.state.redis.journal.FleetJournal`), and each is its
own member of the fleet: its Redis identity (pid and a random token) is made
after the fork.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import sys
import traceback
from typing import TYPE_CHECKING, Any

from scrapy.commands import BaseRunSpiderCommand
from scrapy.exceptions import UsageError

from scrapy_walsh_research.settings import defaults

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import Settings

logger = logging.getLogger(__name__)

#: the environment variable each worker finds its index (0 to N-1) in
WORKER_INDEX_ENV = "WALSH_WORKER_INDEX"
#: signals the parent forwards to its workers
FORWARDED = (signal.SIGINT, signal.SIGTERM)
#: settings naming one component class each, imported before the fork
_COMPONENT_SETTINGS = (
    "SCHEDULER",
    "SCHEDULER_PRIORITY_QUEUE",
    "SCHEDULER_DISK_QUEUE",
    "SCHEDULER_MEMORY_QUEUE",
    "SCHEDULER_START_DISK_QUEUE",
    "SCHEDULER_START_MEMORY_QUEUE",
    "DUPEFILTER_CLASS",
    "STATS_CLASS",
    "LOG_FORMATTER",
    "REQUEST_FINGERPRINTER_CLASS",
    "DOWNLOADER",
    "DOWNLOADER_HTTPCLIENTFACTORY",
    "DOWNLOADER_CLIENTCONTEXTFACTORY",
    "TWISTED_DNS_RESOLVER",
    "SPIDER_LOADER_CLASS",
    "ITEM_PROCESSOR",
)
#: settings naming components by dict (theirs and Scrapy's ``_BASE`` defaults)
_COMPONENT_DICTS = (
    "DOWNLOADER_MIDDLEWARES",
    "SPIDER_MIDDLEWARES",
    "EXTENSIONS",
    "ITEM_PIPELINES",
    "DOWNLOAD_HANDLERS",
    "FEED_EXPORTERS",
    "FEED_STORAGES",
)
#: modules every worker imports whatever its settings (the reactor's module,
#: not the reactor; the HTTP/1.1 client; the blocklist's validator)
_ALWAYS = (
    "twisted.internet.asyncioreactor",
    "twisted.internet.defer",
    "twisted.internet.task",
    "twisted.internet.threads",
    "twisted.web.client",
    "twisted.internet.ssl",
    "scrapy.core.engine",
    "scrapy.core.scraper",
    "scrapy.core.downloader",
    "scrapy.core.downloader.handlers.http11",
    "scrapy.http",
    "scrapy.utils.reactor",
    "jsonschema",
    "redis",
    "scrapy_walsh_research.state.redis.store",
    "scrapy_walsh_research.state.redis.hostclock",
    "scrapy_walsh_research.state.sqlite",
    "scrapy_walsh_research.state.redis.target_queue",
    "scrapy_walsh_research.gates.blocklist.middleware",
    "scrapy_walsh_research.evidence.audit",
    "scrapy_walsh_research.evidence.purge",
)


class Command(BaseRunSpiderCommand):
    requires_project = True
    #: each worker makes its own after the fork: a process made here would
    #: install the reactor (and its asyncio loop) in the parent
    requires_crawler_process = False

    def syntax(self) -> str:
        return "[options] <number of workers>"

    def short_desc(self) -> str:
        return "Run N targets workers on the Redis feed, forked after one start-up"

    def long_desc(self) -> str:
        return (
            "Fork N workers of the project's targets spider reading the Redis feed "
            "(-a redis_key=KEY, default WALSH_REDIS_TARGETS_KEY or "
            f"{defaults.WALSH_REDIS_TARGETS_KEY!r}) from one "
            "process that has already imported them, so the fleet pays Python's start-up "
            "once. Needs WALSH_REDIS_URL and a POSIX fork. SIGINT/SIGTERM are passed to "
            "every worker (first graceful, second forced); exits non-zero if any failed."
        )

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        assert self.settings is not None
        settings = self.settings
        n = _worker_count(args)
        from scrapy_walsh_research.errors import WalshConfigurationError
        from scrapy_walsh_research.settings.walsh import WalshSettings

        try:
            walsh = WalshSettings.from_settings(settings)
        except WalshConfigurationError as exc:
            raise UsageError(str(exc), print_help=False) from None
        if not walsh.redis_url:
            raise UsageError(
                "walsh-workers needs WALSH_REDIS_URL (e.g. -s WALSH_REDIS_URL=redis://"
                "localhost:6379/0): without Redis the state dir is one crawl's at a time, "
                "and workers would share neither the list nor the per-host clocks"
            )
        if not hasattr(os, "fork"):
            raise UsageError("walsh-workers forks its workers: this platform has no os.fork")
        spargs = dict(opts.spargs)
        if spargs.get("list"):
            raise UsageError(
                "workers share one list through Redis: push it with scrapy walsh-enqueue "
                "and give -a redis_key=KEY (each worker given -a list= would fetch it all)"
            )
        if opts.output or opts.overwrite_output:
            raise UsageError(
                "-o/-O would have every worker write the same file: the fleet's records "
                "are in Redis (scrapy walsh-records)"
            )
        spargs.setdefault("redis_key", walsh.redis_targets_key)
        from scrapy.utils.log import configure_logging

        configure_logging(settings)
        # no collection while preloading (it would leave freed holes in pages
        # the workers share); then every object so far frozen out of the
        # workers' collections, which would otherwise write to each one's
        # header and copy nearly every shared page into every worker
        gc.disable()
        spidercls = preload(settings)
        gc.freeze()
        self.exitcode = Fleet(n, settings, spidercls, spargs).run()


def _worker_count(args: list[str]) -> int:
    if len(args) != 1:
        raise UsageError("give the number of workers, e.g. scrapy walsh-workers 4")
    try:
        n = int(args[0])
    except ValueError:
        raise UsageError(f"the number of workers must be an integer, not {args[0]!r}") from None
    if n < 1:
        raise UsageError(f"the number of workers must be at least 1, not {n}")
    return n


def preload(settings: Settings) -> type:
    """Import, in this process, what every worker will import: the spider,
    the add-ons' components and Scrapy's, Twisted's client, jsonschema with
    the bundled schema's validator. Nothing is instantiated that a worker
    would share: no reactor (an import of ``twisted.internet.reactor`` is
    refused and that module left to the workers), no thread, no connection.
    A configuration the add-on refuses is refused here, once."""
    from scrapy.addons import AddonManager
    from scrapy.crawler import Crawler
    from scrapy.utils.misc import load_object
    from scrapy.utils.reactor import is_reactor_installed
    from scrapy.utils.reactorless import install_reactor_import_hook, uninstall_reactor_import_hook

    from scrapy_walsh_research.commands._runner import project_targets_spider
    from scrapy_walsh_research.errors import WalshConfigurationError
    from scrapy_walsh_research.settings.check import addon_installed
    from scrapy_walsh_research.settings.walsh import WalshSettings
    from scrapy_walsh_research.state.directory import state_dir

    hook = install_reactor_import_hook()
    skipped: list[str] = []

    def load(path: Any) -> None:
        if not isinstance(path, str) or "." not in path:
            return
        try:
            if path.rsplit(".", 1)[1][:1].isupper():  # a class: module.Name
                load_object(path)
            else:
                __import__(path)
        except Exception:
            skipped.append(path)

    try:
        scratch = settings.copy()
        AddonManager.load_pre_crawler_settings(scratch)
        spidercls = project_targets_spider(scratch)
        crawler = Crawler(spidercls, scratch)
        try:
            crawler.addons.load_settings(crawler.settings)
            # an unusable WALSH_STATE_DIR, refused once here, not by every worker
            state_dir(WalshSettings.from_settings(crawler.settings))
        except WalshConfigurationError as exc:
            raise UsageError(str(exc), print_help=False) from None
        merged = crawler.settings
        if not addon_installed(merged):
            raise UsageError(
                f"the {spidercls.__name__} spider runs without the Walsh-Research add-on "
                "here: run walsh-workers in a project whose settings have "
                'ADDONS = {"scrapy_walsh_research.Addon": 0}, or give the spider that line',
                print_help=False,
            )
        for name in _ALWAYS:
            load(name)
        for name in _COMPONENT_SETTINGS:
            load(merged.get(name))
        for name in _COMPONENT_DICTS:
            for key in (name, f"{name}_BASE"):
                # middlewares are keys (to their order); handlers, values
                for component, value in merged.getdict(key).items():
                    load(component)
                    load(value)
        from scrapy_walsh_research.core.blocklist.schema import bundled_schema
        from scrapy_walsh_research.documents.blocklist.schema import load_validator

        load_validator(bundled_schema())  # jsonschema's meta-schemas and format checkers
    finally:
        uninstall_reactor_import_hook(hook)
    if is_reactor_installed():  # pragma: no cover - the hook refuses it
        raise RuntimeError("a reactor was installed before the fork; the workers cannot share it")
    if skipped:
        logger.debug("Left to the workers to import: %(paths)s", {"paths": skipped})
    return spidercls


class Fleet:
    """The parent: fork the workers, pass signals on, reap them."""

    def __init__(self, n: int, settings: Settings, spidercls: type, spargs: dict[str, Any]) -> None:
        self.n = n
        self.settings = settings
        self.spidercls = spidercls
        self.spargs = spargs
        #: pid -> worker index, of the workers still running
        self.running: dict[int, int] = {}
        self.failed: list[int] = []

    def run(self) -> int:
        """Fork, supervise, and return the exit code (1 if any worker failed)."""
        waited = {*FORWARDED, signal.SIGCHLD}
        # SIGCHLD is ignored by default, and an ignored signal may be
        # discarded instead of waiting for sigwait: give it a handler
        previous_chld = signal.signal(signal.SIGCHLD, lambda *_: None)
        # blocked from before the first fork: a signal arriving meanwhile
        # waits for sigwait below (and a worker unblocks only once it has
        # its own handlers), so none is lost and none reaches a half-made worker
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
        parent = os.getpid()
        try:
            for index in range(self.n):
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        code = self._worker(index, parent)
                    except BaseException:
                        traceback.print_exc()
                    finally:
                        with contextlib.suppress(Exception):
                            logging.shutdown()
                            sys.stdout.flush()
                            sys.stderr.flush()
                        os._exit(code)
                self.running[pid] = index
                logger.info(
                    "walsh-workers: worker %(i)d/%(n)d started, pid %(pid)d",
                    {"i": index, "n": self.n, "pid": pid},
                )
            gc.enable()  # what the parent makes from here on is its own
            signals = 0
            while self.running:
                got = signal.sigwait(waited)
                if got == signal.SIGCHLD:
                    self._reap()
                    continue
                signals += 1
                logger.info(
                    "walsh-workers: %(sig)s received, passed to %(k)d worker(s) (%(how)s)",
                    {
                        "sig": signal.Signals(got).name,
                        "k": len(self.running),
                        "how": "graceful; send again to force"
                        if signals == 1
                        else "forcing an unclean stop",
                    },
                )
                for pid in list(self.running):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, got)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            signal.signal(signal.SIGCHLD, previous_chld)
        if self.failed:
            logger.error(
                "walsh-workers: %(k)d of %(n)d worker(s) failed: %(which)s",
                {"k": len(self.failed), "n": self.n, "which": sorted(self.failed)},
            )
            return 1
        logger.info("walsh-workers: all %(n)d workers ended cleanly", {"n": self.n})
        return 0

    def _reap(self) -> None:
        while self.running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # pragma: no cover - none left
                self.running.clear()
                return
            if pid == 0:
                return
            index = self.running.pop(pid, None)
            if index is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if code == 0:
                logger.info(
                    "walsh-workers: worker %(i)d (pid %(pid)d) exited, code 0",
                    {"i": index, "pid": pid},
                )
                continue
            self.failed.append(index)
            if code < 0:
                logger.error(
                    "walsh-workers: worker %(i)d (pid %(pid)d) was killed by %(sig)s; the "
                    "lines it held go back to the feed once its heartbeat lapses",
                    {"i": index, "pid": pid, "sig": signal.Signals(-code).name},
                )
            else:
                logger.error(
                    "walsh-workers: worker %(i)d (pid %(pid)d) exited, code %(code)d",
                    {"i": index, "pid": pid, "code": code},
                )

    def _worker(self, index: int, parent: int) -> int:
        """One worker, in the forked child: the spider in a process of its own
        making, as ``scrapy crawl`` runs it. Returns its exit code."""
        early: list[int] = []

        def remember(signum: int, _: Any) -> None:
            early.append(signum)  # replayed once Scrapy's own handlers are in

        for sig in FORWARDED:
            signal.signal(sig, remember)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        gc.enable()
        # its own process group: a Ctrl-C at the terminal reaches the parent
        # alone, which passes it on once (twice would force the stop)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        _stop_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.environ[WORKER_INDEX_ENV] = str(index)

        from scrapy import signals
        from scrapy.crawler import AsyncCrawlerProcess, CrawlerProcess
        from scrapy.utils.reactor import _asyncio_reactor_path

        settings = self.settings.copy()
        if settings.getbool("TELNETCONSOLE_ENABLED"):
            settings.set(
                "TELNETCONSOLE_PORT",
                telnet_ports(settings.getlist("TELNETCONSOLE_PORT"), index, self.n),
                priority=settings.getpriority("TELNETCONSOLE_PORT") or "cmdline",
            )
        if (
            settings["TWISTED_REACTOR"] == _asyncio_reactor_path
            and not settings.getbool("FORCE_CRAWLER_PROCESS")
        ) or not settings.getbool("TWISTED_REACTOR_ENABLED"):
            process: CrawlerProcess | AsyncCrawlerProcess = AsyncCrawlerProcess(settings)
        else:
            process = CrawlerProcess(settings)
        crawler = process.create_crawler(self.spidercls)

        def opened() -> None:
            crawler.stats.set_value("walsh/workers/index", index)
            crawler.stats.set_value("walsh/workers/count", self.n)

        crawler.signals.connect(opened, signal=signals.engine_started, weak=False)
        process.crawl(crawler, **self.spargs)
        if settings.getbool("TWISTED_REACTOR_ENABLED"):
            from twisted.internet import reactor

            def replay() -> None:
                for signum in early:
                    os.kill(os.getpid(), signum)

            # after startup's triggers, so after Scrapy installed its handlers
            # (Twisted types its reactor interfaces for the mypy-zope plugin)
            reactor.callWhenRunning(lambda: reactor.callLater(0, replay))  # type: ignore[arg-type]
        process.start()
        return 1 if process.bootstrap_failed else 0


def telnet_ports(portrange: list[Any], index: int, n: int) -> list[int]:
    """Worker *index*'s share of ``TELNETCONSOLE_PORT`` (Scrapy's ``[first,
    last]`` range, tried in order): an n-th of the range of its own, so
    siblings starting together never try one port at once. Two that do
    both bind it (Twisted sets ``SO_REUSEADDR``) and the second fails in
    ``listen()``, which Scrapy does not catch: a traceback, at ERROR. A range
    too short for every worker to have a port gives each one the port the
    system picks (``[]``), as does an empty one; Scrapy logs which it got."""
    ports = [int(p) for p in portrange]
    if not ports:
        return []
    first, last = ports[0], ports[-1]
    share = (last - first + 1) // n
    if share < 1:
        return []
    start = first + index * share
    return [start, start + share - 1]


def _stop_with_parent(parent: int) -> None:
    """Have the kernel send this worker SIGTERM (a graceful stop) if the
    parent dies without passing a signal on (Linux; elsewhere the worker
    runs its list to the end as a lone ``scrapy crawl`` would)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)
