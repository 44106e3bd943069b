"""Scheduling feed polls with APScheduler (3.x ``BackgroundScheduler``).

Each source becomes one interval job: first run right away, then every
``every_seconds`` plus a random jitter of up to ``jitter_fraction`` of the
interval, so sources configured alike do not all hit the network at once.  A job
never runs twice at the same time (``max_instances=1``) and missed runs collapse
into one (``coalesce=True``).  Polls run on a small thread pool; a poll never
raises (see :class:`~roses_app.connectors.poller.Poller`), so one failing
source never stops the others.

Slow sources must not delay the others either.  Every fetch ends by its deadline
(``fetch.timeout``), and a source whose last fetch hit it, or took more than
half of it, is polled in a *slow lane*: a pool of its own (``slow_workers``
threads), so a handful of servers that dribble their answers only ever wait on
each other.  A fast poll brings the source back.  Until a source has been seen
slow once, it may hold a worker of the main pool, for one deadline at most.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor as FuturesPool

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from roses_app.config.model import FeedSource, SourceConfig
from roses_app.connectors.common import PollJob, start_interval_scheduler
from roses_app.connectors.poller import Poller, PollResult

log = logging.getLogger(__name__)

ResultHook = Callable[[PollResult], None]

SLOW_LANE = "slow"  # the executor of sources whose fetches are slow
SLOW_FRACTION = 0.5  # of fetch.timeout: a fetch taking longer marks its source slow


class FeedScheduler:
    """Polls every feed source on its own jittered interval."""

    def __init__(
        self,
        poller: Poller,
        sources: Iterable[SourceConfig] | Mapping[str, SourceConfig],
        clock: Callable[[], float] = time.time,
        *,
        max_workers: int = 4,
        slow_workers: int = 2,
        jitter_fraction: float = 0.1,
        on_result: ResultHook | None = None,
    ) -> None:
        self.poller = poller
        values = sources.values() if isinstance(sources, Mapping) else sources
        self.sources: list[FeedSource] = [s for s in values if isinstance(s, FeedSource)]
        self.clock = clock
        self.max_workers = max(1, max_workers)
        self.slow_workers = max(1, slow_workers)
        self.slow_sources: set[str] = set()  # polled in the slow lane
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
        scheduler = start_interval_scheduler(jobs, self.max_workers, self.jitter_fraction)
        scheduler.add_executor(ThreadPoolExecutor(self.slow_workers), alias=SLOW_LANE)
        self._scheduler = scheduler
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
        self._choose_lane(source.name, result)
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

    def _choose_lane(self, name: str, result: PollResult) -> None:
        """Move a source to the slow lane after a slow fetch, back after a fast one."""
        scheduler = self._scheduler
        if scheduler is None or result.fetch_seconds is None:
            return  # no jobs to move (poll_all_once), or nothing fetched: nothing learnt
        slow_after = self.poller.settings.timeout_seconds * SLOW_FRACTION
        slow = result.timed_out or result.fetch_seconds > slow_after
        with self._results_lock:
            if slow == (name in self.slow_sources):
                return
            (self.slow_sources.add if slow else self.slow_sources.discard)(name)
        lane = SLOW_LANE if slow else "default"
        try:
            scheduler.modify_job(f"feed:{name}", executor=lane)
        except JobLookupError:
            return  # shutting down
        log.info(
            "source %s: fetch took %.1f s; polled in the %s lane from now on",
            name,
            result.fetch_seconds,
            "slow" if slow else "main",
        )
