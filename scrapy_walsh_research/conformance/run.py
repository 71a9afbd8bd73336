"""The conformance check's orchestration: the spec's §8 judged from what a
sandbox origin received.

It starts the loopback origin (:mod:`.scenario`), runs the project's real
``targets`` spider with the project's effective settings (:mod:`.probe`) five
times (a first run; a restart with the blocklist unreachable, with the sitemap
host's pages again; a restart with the blocklist schema-invalid; a restart
where the schema and blocklist URLs both answer a gateway's error object; a
restart once the list blocks a host crawled before), once more with
``HTTPCACHE_ENABLED=True``, which must be refused before any request, and
judges each requirement (:mod:`.checks`) from the origin's log (arrival
times, headers, paths), the records, the stats and the state left behind.
Nothing is asserted without a measurement.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy.utils.defer import maybe_deferred_to_future

from scrapy_walsh_research.conformance.checks import Observed, judge
from scrapy_walsh_research.conformance.identity import Identity
from scrapy_walsh_research.conformance.probe import Probe
from scrapy_walsh_research.conformance.scenario import (
    BLOCKLIST_REFRESH_S,
    PURGED_HOST,
    SITEMAP_MIN_TARGETS,
    Phase,
    Scenario,
)
from scrapy_walsh_research.conformance.stored import stored_about
from scrapy_walsh_research.evidence.verdicts import ConformanceResult
from scrapy_walsh_research.sandbox.origin import SandboxServer

if TYPE_CHECKING:
    from scrapy.settings import Settings


async def _sleep(seconds: float) -> None:
    from twisted.internet import reactor, task  # the running reactor, installed by then

    await maybe_deferred_to_future(task.deferLater(reactor, seconds, lambda: None))


async def run_conformance(
    base: Settings, spidercls: type, work: Path | None = None
) -> ConformanceResult:
    """Run the sandbox crawls with *base* settings and judge them."""
    work = work or Path(tempfile.mkdtemp(prefix="walsh-conformance-"))
    server = SandboxServer().start()
    scenario = Scenario(server)
    scenario.install()
    # The project's settings as given, not the typed object: a configuration
    # the start-up check refuses is judged (every row fails with the reason),
    # never raised here.
    shared_state = bool(base.get("WALSH_REDIS_URL"))
    signing_key_set = bool(base.get("WALSH_SIGNING_KEY"))
    identity = Identity.for_run(base, work, server)
    if identity is not None:
        # the project's signature settings, with a key made for this run: the
        # real key never signs sandbox traffic
        base = base.copy()
        base.set("WALSH_SIGNING_KEY", str(identity.key_path), priority="cmdline")
    probe = Probe(spidercls, base, scenario, work)
    restart = scenario.restart_lines()
    try:
        first = await probe.crawl(scenario.run1_lines())
        if first.refused:
            # the project's own configuration is refused: so would every
            # restart be, and the rows fail alike (no phase to wait for)
            down = invalid = gateway = opted_out = cache = first
            stored_before = stored_about(probe.state, PURGED_HOST)
        else:
            # Each restart comes once the adopted list is due (its refresh is
            # PT1S), so the restarted run must fetch it and meet the change.
            await _enter(scenario, Phase.BLOCKLIST_DOWN)
            down = await probe.crawl(restart + scenario.sitemap_lines(), WALSH_RUN_INTERVAL=0,
                                     WALSH_SITEMAP_MIN_TARGETS=SITEMAP_MIN_TARGETS)  # fmt: skip
            await _enter(scenario, Phase.SCHEMA_INVALID)
            invalid = await probe.crawl(restart)  # the project's cadence
            await _enter(scenario, Phase.GATEWAY_ERROR)
            gateway = await probe.crawl(restart, WALSH_RUN_INTERVAL=0)
            stored_before = stored_about(probe.state, PURGED_HOST)
            await _enter(scenario, Phase.OPTED_OUT)
            opted_out = await probe.crawl(restart, WALSH_RUN_INTERVAL=0)
            cache = await probe.crawl_with_http_cache()
    finally:
        await maybe_deferred_to_future(server.stop())
    seen = Observed(
        scenario=scenario,
        first=first,
        down=down,
        invalid=invalid,
        gateway=gateway,
        opted_out=opted_out,
        cache=cache,
        max_inflight=server.origin.max_inflight,
        overlaps=len(server.origin.overlapping()),
        base=base,
        state=probe.state,
        stored_before=stored_before,
        identity=identity,
        shared_state=shared_state,
        signing_key_set=signing_key_set,
    )
    result = ConformanceResult(max_inflight=server.origin.max_inflight, refused=first.refused)
    judge(result, seen)
    return result


async def _enter(scenario: Scenario, phase: Phase) -> None:
    """Switch the operator's answers to *phase*, then wait until the list
    adopted so far is due for a refresh."""
    scenario.phase = phase
    await _sleep(BLOCKLIST_REFRESH_S + 0.1)
