"""Scheduling feed polls with APScheduler (3.x ``BackgroundScheduler``).

Each source becomes one interval job: first run right away, then every
``every_seconds`` plus a random jitter of up to ``jitter_fraction`` of the
interval, so sources configured alike do not all hit the network at once.  A job
never runs twice at the same time (``max_instances=1``) and missed runs collapse
into one (``coalesce=True``).  Polls run on a small thread pool; a poll never
raises (see :class:`~roses_app.connectors.poller.Poller`), so one failing
source never stops the others.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor as FuturesPool

from apscheduler.schedulers.background import BackgroundScheduler

from roses_app.config.model import FeedSource, SourceConfig
from roses_app.connectors.common import PollJob, start_interval_scheduler
from roses_app.connectors.poller import Poller, PollResult

log = logging.getLogger(__name__)

ResultHook = Callable[[PollResult], None]


class FeedScheduler:
    """Polls every feed source on its own jittered interval."""

    def __init__(
        self,
        poller: Poller,
        sources: Iterable[SourceConfig] | Mapping[str, SourceConfig],
        clock: Callable[[], float] = time.time,
        *,
        max_workers: int = 4,
        jitter_fraction: float = 0.1,
        on_result: ResultHook | None = None,
    ) -> None:
        self.poller = poller
        values = sources.values() if isinstance(sources, Mapping) else sources
        self.sources: list[FeedSource] = [s for s in values if isinstance(s, FeedSource)]
        self.clock = clock
        self.max_workers = max(1, max_workers)
        self.jitter_fraction = jitter_fraction
        self.on_result = on_result
        self.last_results: dict[str, tuple[float, PollResult]] = {}
        self._results_lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    def start(self) -> None:
        """Schedule every source (first poll right away) and return."""
        if self._scheduler is not None:
            raise RuntimeError("FeedScheduler already started")
        jobs = [
            PollJob(f"feed:{s.name}", f"poll {s.name}", self.poller.interval(s), self._run, [s])
            for s in self.sources
        ]
        self._scheduler = start_interval_scheduler(jobs, self.max_workers, self.jitter_fraction)
        log.info("polling %d feed source(s)", len(self.sources))

    def poll_all_once(self, force: bool = False) -> list[PollResult]:
        """Poll every source once, in parallel; results in source order (``roses once``)."""
        if not self.sources:
            return []
        with FuturesPool(max_workers=min(self.max_workers, len(self.sources))) as pool:
            futures = [pool.submit(self._run, source, force) for source in self.sources]
            return [f.result() for f in futures]

    def shutdown(self, wait: bool = True) -> None:
        """Stop scheduling; with ``wait`` let the polls in flight finish."""
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None and scheduler.running:
            scheduler.shutdown(wait=wait)

    def _run(self, source: FeedSource, force: bool = False) -> PollResult:
        result = self.poller.poll(source, force=force)
        with self._results_lock:
            self.last_results[source.name] = (self.clock(), result)
        if result.status == "ok":
            log.info("source %s: %s", source.name, result.message)
        elif result.status == "not_modified":
            log.debug("source %s: not modified", source.name)
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:
                log.exception("source %s: the result hook failed", source.name)
        return result
