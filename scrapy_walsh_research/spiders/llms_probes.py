"""Which line's record carries an origin's ``/llms.txt`` probe (R9): once
per host per run, and for a fleet fed through Redis, once for the fleet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_walsh_research.state.namespaces import LLMS_PROBES

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from scrapy_walsh_research.state import StateStore

#: how long a worker may hold an origin's /llms.txt lock: it only reads and
#: writes the claim under it (a holder that dies frees it within the lock's lease)
LLMS_CLAIM_TTL = 30.0


class LlmsProbes:
    """The line that probes each origin's ``/llms.txt`` in this run."""

    def __init__(self, crawler: Crawler, store: StateStore) -> None:
        self.crawler = crawler  # its stats are made after the spider
        self.store = store
        #: origin -> the line whose record carries its probe
        self.lines: dict[str, int] = {}

    async def probed_by(self, origin: str, line: int, ticket: dict[str, str] | None) -> int | None:
        """The line whose record carries *origin*'s ``/llms.txt`` probe in
        this run, or None when it is this line's (the caller probes).

        Once per host per run: per process for a list; for a fleet's feed,
        once for the fleet, as robots.txt is fetched once per origin: under
        the origin's single-flight lock, the first worker to need it claims
        it for the run (the fed batch) in the shared store, and every other
        worker reads that claim instead of probing. The probe itself is not
        waited for: another worker's record only points at the line that
        carries it. A line delivered again (its worker died) probes again."""
        first = self.lines.get(origin)
        if first is not None:
            return first
        if ticket is not None and self.store.shared:
            run = ticket["records"]  # the feed's batch: one per enqueued list
            for _ in range(3):
                release = await self.store.single_flight(f"llms:{origin}", ttl=LLMS_CLAIM_TTL)
                try:
                    claim = await self.store.get(LLMS_PROBES, origin)
                    if (
                        isinstance(claim, dict)
                        and claim.get("run") == run
                        and isinstance(claim.get("line"), int)
                        and claim["line"] != line
                    ):
                        self.crawler.stats.inc_value("walsh/llms/probed_by_worker")
                        self.lines[origin] = claim["line"]
                        return int(claim["line"])
                    if release is not None:
                        mine = {"run": run, "line": line, "at": self.store.time()}
                        await self.store.put(LLMS_PROBES, origin, mine)
                        break
                finally:
                    if release is not None:
                        await release()
                # the worker that held the lock claimed nothing for this run: try again
        self.lines[origin] = line
        return None
