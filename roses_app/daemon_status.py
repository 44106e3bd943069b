"""What the daemon tells of itself: ``/healthz``, the rows Spark dropped behind the
watermark, the sources' health, the ``/sources`` listing and the ``/metrics`` snapshot.

:class:`DaemonStatus` is a part of :class:`roses_app.daemon.Daemon` (its base class):
it reads the daemon's parts, named below, and changes nothing but its late-row counts.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roses_app.algebra.time.lateness import split_tallies
from roses_app.config.model import Config
from roses_app.connectors import FeedScheduler, StateStore
from roses_app.connectors.listing import Snapshot as SourceRows
from roses_app.connectors.listing import rows_of
from roses_app.connectors.mail import MailConnectors
from roses_app.heap import PacedFullCollections
from roses_app.metrics import PER_SOURCE_LIMIT, Metrics, Snapshot
from roses_app.publish.catalog import Catalog
from roses_app.publish.websub import Hub
from roses_app.spark.progress import WatermarkDrops
from roses_app.spool import Spool
from roses_app.store import Store

IMPLAUSIBLE_NAMED = 20  # /healthz names this many sources above the per-source limit
STREAM_DETAIL_LIMIT = 1000  # /healthz lists streams one by one up to this many
NOT_RUNNING_SHOWN = 20  # above it, the names of this many streams not running


@dataclass(frozen=True)
class QueryState:
    """A Spark query's state as last read from the JVM (see
    :meth:`DaemonStatus._look_at_queries`)."""

    active: bool
    status: str | None
    streams: frozenset[str]


KEPT_ROWS_SECONDS = 10.0  # sources' rows, above PER_SOURCE_LIMIT sources


class DaemonStatus:
    """The daemon's status readers (see the module docstring)."""

    config: Config
    store: Store
    spool: Spool
    states: StateStore
    scheduler: FeedScheduler
    mail: MailConnectors
    metrics: Metrics
    hub: Hub | None
    queries: list[Any]
    errors: Any  # Spark accumulator: dropped items per step
    _late: WatermarkDrops  # per query: rows dropped behind the watermark
    _query_states: dict[str, QueryState]  # per query, replaced whole by each look
    _source_rows: SourceRows | None = None  # made at the first source_rows()
    _lock: threading.Lock  # the counters'
    counters: dict[str, int]
    clock: Callable[[], float]
    started_at: float
    collections: PacedFullCollections  # the main process's full collections

    def _streams_health(self, active: set[str]) -> dict[str, Any]:
        """Each stream's state, or above STREAM_DETAIL_LIMIT streams (100,000
        subscriptions make megabytes of JSON and seconds a request) their counts and
        the first of those whose query does not run."""
        published = set(self.store.streams())
        names = self.config.streams
        if len(names) <= STREAM_DETAIL_LIMIT:
            return {
                name: {"running": name in active, "published": name in published} for name in names
            }
        stopped = [name for name in names if name not in active]
        return {
            "total": len(names),
            "running": len(names) - len(stopped),
            "published": len(published),
            "not_running": stopped[:NOT_RUNNING_SHOWN],
        }

    def health(self) -> dict[str, Any]:
        """Status for /healthz, from what the daemon's loop last read (no py4j call)."""
        queries = self._queries_health()
        active = self._active_streams()
        # Not healthy until every stream's query runs (the JVM takes seconds to start).
        ok = all(name in active for name in self.config.streams)
        streams = self._streams_health(active)
        sources = self._sources_health()
        dropped, tallies = self._tallies()
        with self._lock:
            counters = dict(self.counters)
        counters["batches_written"] = self.store.written["batches"]
        counters["rows_written"] = self.store.written["rows"]
        return {
            "ok": ok,
            "uptime_seconds": round(self.clock() - self.started_at, 1),
            "queries": queries,
            "streams": streams,
            **sources,
            "spool_items": self.spool.count(),
            "feeds": Catalog(self.config, self.store).count(),
            "dropped_items_per_step": dropped,
            # windows over publication time: items later than the lateness, results
            # computed again but unchanged (not published again)
            "late_items_per_stream": tallies["late"],
            "unchanged_windows_per_stream": tallies["unchanged"],
            "revised_windows_per_stream": tallies["revised"],  # retractions
            # publication dates not believed (before 1990, too far ahead): ingest time used
            "implausible_dates_per_source": self._implausible_health(),
            "websub": self.hub.stats() if self.hub is not None and self.hub.running else {},
            # the main process's full collections (at the loop's pace) and their time
            "full_collections": self.collections.full,
            "full_collection_seconds": round(self.collections.seconds, 3),
            **counters,
        }

    def _count_late(self) -> None:
        """Add up the rows each query's stateful operators dropped behind the watermark
        (Spark reports them per micro-batch): one py4j call per query, a few more when
        batches went by since the last look."""
        for running in list(self.queries):
            self._late.update(running.name, running.query.lastProgress, _recent(running.query))

    def watermark_drops(self) -> dict[str, int]:
        """Per Spark query: the rows dropped behind the watermark since the start
        (ROSES's own late items, counted per stream, are not among them)."""
        return dict(self._late.dropped)

    def _look_at_queries(self) -> None:
        """Read each query's state from the JVM for /healthz to answer from: py4j calls
        take up to hundreds of milliseconds while the JVM is busy, and a probe must not
        wait for them (the daemon's loop looks every second)."""
        self._query_states = {
            r.name: QueryState(bool(r.query.isActive), r.query.status.get("message"), r.streams)
            for r in list(self.queries)
        }

    def _active_streams(self) -> set[str]:
        """The streams whose query ran at the last look."""
        return {name for s in self._query_states.values() if s.active for name in s.streams}

    def _queries_health(self) -> dict[str, Any]:
        """Each Spark query's state at the last look (no py4j call)."""
        late = self.watermark_drops()
        return {
            name: {
                "active": state.active,
                "status": state.status,
                "streams": len(state.streams),
                # of all its streams together: Spark counts them per operator
                "rows_dropped_by_watermark": late.get(name, 0),
            }
            for name, state in self._query_states.items()
        }

    def _sources_health(self) -> dict[str, Any]:
        """Each source's last poll, or above the metrics' per-source limit (100,000
        feeds make megabytes of JSON) the count of each outcome: ``/sources`` pages
        through them."""
        if not self.metrics.per_source:  # kept up to date by the schedulers: no 100,000-loop
            # dict() copies in one step (the fetch loop's thread updates the counts)
            outcomes = Counter(dict(self.scheduler.outcomes)) + Counter(
                result.status for _, result in self.mail.last_results.values()
            )
            return {
                "sources": {"see": "/sources", "total": len(self.config.sources)},
                "source_outcomes": dict(outcomes),
            }
        results = {**self.scheduler.last_results, **self.mail.last_results}
        return {
            "sources": {
                name: {
                    "status": result.status,
                    "items": result.n_items,
                    "message": result.message,
                    "at": at,
                }
                for name, (at, result) in results.items()
            }
        }

    def _implausible_health(self) -> dict[str, Any]:
        """Publication dates not believed, per source; above the metrics' per-source
        limit their totals and the sources with most (a farm of 100,000 feeds with old
        archives named thousands of sources in every /healthz answer)."""
        dates = dict(self.spool.implausible_dates)  # one C-level copy: appends go on
        if self.metrics.per_source:
            return dates
        most = dict(Counter(dates).most_common(IMPLAUSIBLE_NAMED))
        return {"sources": len(dates), "items": sum(dates.values()), "most": most}

    def sources_page(self, params: Mapping[str, str]) -> dict[str, Any]:
        """``/sources``: a page of the feed sources' health (ValueError: a bad query)."""
        return self.source_rows()(params)

    def source_rows(self) -> SourceRows:
        """Every feed source's row, for ``/sources`` and the console's pages alike:
        kept a while above PER_SOURCE_LIMIT sources, where reading them all takes a
        second (100,000); below, read at each page, so a few sources polled every
        minute show their last and next poll as they are."""
        if self._source_rows is None:
            kept = KEPT_ROWS_SECONDS if len(self.scheduler.sources) > PER_SOURCE_LIMIT else 0.0
            self._source_rows = SourceRows(
                lambda: rows_of(self.states, self.scheduler.sources, self.scheduler.live()),
                max_age=kept,
            )
            if kept > 0:
                self._source_rows.warm()
        return self._source_rows

    def snapshot(self) -> Snapshot:
        """What ``/metrics`` reads at each scrape (see :mod:`roses_app.metrics`)."""
        data = self.config.settings.data_dir
        spool = [*self.spool.log_dir.glob("*.jsonl"), *self.spool.archive_dir.glob("*.jsonl")]
        dropped, tallies = self._tallies()
        return Snapshot(
            published=dict(self.store.published),
            dropped=dropped,
            too_late=tallies["late"],
            unchanged=tallies["unchanged"],
            revised=tallies["revised"],
            late=self.watermark_drops(),
            store_bytes=sum(map(_size, data.glob("store.sqlite*"))),
            spool_bytes=sum(map(_size, spool)),
            spool_files=len(spool),
            websub=self.hub.stats() if self.hub is not None and self.hub.running else {},
        )

    def _tallies(self) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
        return split_tallies(dict(self.errors.value) if self.errors is not None else {})


def _recent(query: Any) -> Callable[[], Sequence[Any]]:
    """Reads ``query``'s recent progress reports when called (a py4j call each)."""
    return lambda: query.recentProgress


def _size(path: Path) -> int:
    """A file's size; 0 if it went meanwhile (Spark archives, the spool compacts)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
