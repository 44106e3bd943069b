"""The daemon: wires connectors → spool → Spark queries → store → HTTP publication.

This module and the CLI are the only places that connect the stages.  ``Daemon.run``
is the long-running service; ``Daemon.once`` polls every source once, processes all
pending items and writes the published feeds as static files (for cron).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from roses_app.algebra.plan.operators import Stream
from roses_app.algebra.planner.heartbeats import HeartbeatPlan, heartbeat_plan
from roses_app.config.model import Config, FeedSource
from roses_app.connectors import FeedScheduler, StateStore
from roses_app.connectors.mail import MailConnectors
from roses_app.connectors.poller import PollResult
from roses_app.connectors.websub_in import PushTable, Subscriber
from roses_app.daemon_reload import ConfigWatcher, ReloadResult, reload_daemon, watched_files
from roses_app.daemon_status import DaemonStatus
from roses_app.datalock import DataDirLock
from roses_app.heap import PacedFullCollections
from roses_app.items import MICROS
from roses_app.metrics import Metrics
from roses_app.publish.console import PollHistory
from roses_app.publish.export import export_static
from roses_app.publish.pull import PullQueries
from roses_app.publish.server import HttpServer, create_app
from roses_app.publish.websub import Hub
from roses_app.spark.progress import WatermarkDrops
from roses_app.spool import Spool
from roses_app.store import Store
from roses_app.xmlfn import budget

log = logging.getLogger(__name__)

MAX_RESTART_DELAY = 300.0  # seconds between restarts of a query that keeps failing
STOP_BATCH_SECONDS = 15.0  # on stop, how long a micro-batch in flight may take to finish


def oldest_first(items: list[tuple[str, int | None]]) -> list[tuple[str, int | None]]:
    """Order a feed's items so the newest gets the highest seq (shown first in feeds).

    By publication time when every item has one; else reversed document order, as
    feeds list their newest entry first.
    """
    ordered = list(reversed(items))
    if all(published is not None for _, published in ordered):
        ordered.sort(key=lambda pair: pair[1] or 0)  # stable: ties keep document order
    return ordered


class Daemon(DaemonStatus):
    """One ROSES instance over one config and one data directory."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        # the expressions its server evaluates (pull queries, previews) have Spark's limit
        budget.configure(config.settings.limits.item_seconds)
        self.clock = clock
        self.queries: list[Any] = []
        self.errors: Any = None  # Spark accumulator: dropped items per step
        self.http: HttpServer | None = None
        self.hub: Hub | None = None
        self.metrics = Metrics(self.snapshot, sources=len(config.sources))
        self.beats = heartbeat_plan(self.streams())
        self._late = WatermarkDrops()  # per query: rows dropped behind the watermark
        self._query_states = {}  # per query, as last read (see _look_at_queries)
        self.started_at = clock()
        self.collections = PacedFullCollections()  # full collections at the loop's pace
        self.counters = {
            "items_spooled": 0,
            "query_restarts": 0,
            "stateless_rebases": 0,
        }
        self._lock = threading.Lock()
        self._restarts: dict[str, tuple[float, float]] = {}  # query -> (delay, not before)
        self.spark: Any = None  # the SparkSession once started (a reload keeps it)
        self._serial = threading.RLock()  # a reload, and the loop's work on the queries
        self.watcher = ConfigWatcher(watched_files(config))  # feeds.yaml changing on disk
        data = config.settings.data_dir
        # first of all: a second process on this folder is refused before it touches it
        self.folder_lock = DataDirLock(data)
        self.folder_lock.acquire()
        try:
            self._open(config, data)
        except BaseException:
            self.folder_lock.release()
            raise

    def _open(self, config: Config, data: Path) -> None:
        self.spool = Spool(data / "spool", max_future=config.settings.max_future)
        self.store = Store(data / "store.sqlite")
        self.states = StateStore(data / "sources.sqlite")
        self.history: PollHistory | None = None  # each source's last polls, for the console
        if config.settings.console is not None:
            self.history = PollHistory(data / "poll_history.sqlite")
        on_poll = self.metrics.on_poll if self.history is None else self._on_poll
        base_url = config.settings.http.base_url
        self.push_table: PushTable | None = None
        self.subscriber: Subscriber | None = None
        if base_url is not None:  # hubs can call back only where base_url says
            self.push_table = PushTable(data / "websub_in.sqlite")
            agent = config.settings.fetch.user_agent
            self.subscriber = Subscriber(self.push_table, base_url, self.clock, user_agent=agent)
        self.scheduler = FeedScheduler(
            self.states,
            config.settings.fetch,
            config.sources,
            self.ingest_many,
            self.clock,
            base_dir=config.path.parent,
            on_result=on_poll,
            subscriber=self.subscriber,
            spill_dir=data / "parse",
            append_every=config.settings.spark.busy_trigger_seconds,
        )
        self.mail = MailConnectors(
            config.sources, data / "mail.sqlite", self.ingest, self.clock, data, on_result=on_poll
        )

    def _on_poll(self, result: PollResult) -> None:
        self.metrics.on_poll(result)
        if self.history is not None:
            self.history.record(result)

    # -- stage glue -----------------------------------------------------------------
    def ingest(self, source: str, items: list[tuple[str, int | None]]) -> None:
        """Connector sink: append to the spool (which drops what it has seen)."""
        self.ingest_many([(source, items)])

    def ingest_many(self, polls: Sequence[tuple[str, list[tuple[str, int | None]]]]) -> None:
        """The items of several polls as one spool append (one fsync)."""
        ordered = [
            # mail readers already hand their items over oldest first
            (source, oldest_first(items) if self._is_feed(source) else items)
            for source, items in polls
        ]
        appended = self.spool.append_many(ordered)
        for (source, items), events in zip(ordered, appended, strict=True):
            ages = ((e.ts - e.published) / MICROS for e in events if e.published is not None)
            self.metrics.on_ingest(source, len(items), len(events), ages)
            if events:
                log.info("source %s: %d new item(s) spooled", source, len(events))
        with self._lock:
            self.counters["items_spooled"] += sum(map(len, appended))

    def _is_feed(self, source: str) -> bool:
        return isinstance(self.config.sources.get(source), FeedSource)

    def streams(self) -> list[Stream]:
        return [s.stream for s in self.config.streams.values()]

    def start_queries(self, once: bool) -> list[Any]:
        """Start the queries of the global plan of every stream (and the JVM, unless a
        previous start left it running: a reload)."""
        from roses_app.spark.runner import plan_streams
        from roses_app.spark.session import build_session

        settings = self.config.settings
        if self.spark is not None:
            return self._start_engine(plan_streams(self.streams(), settings.namespaces), once)
        lock = () if self.folder_lock.fd is None else (self.folder_lock.fd,)
        with ThreadPoolExecutor(1, thread_name_prefix="spark-start") as pool:
            # the JVM starts in its own process: the plan is worked out meanwhile
            starting = pool.submit(
                build_session,
                settings.spark,
                settings.data_dir / "cache",
                lock,
                finite=once,
                limits=settings.limits,
            )
            planned = plan_streams(self.streams(), settings.namespaces)
            self.spark = starting.result()
        return self._start_engine(planned, once)

    def _start_engine(self, planned: Any, once: bool) -> list[Any]:
        from roses_app.spark.runner import Engine, error_counter, start_queries

        settings = self.config.settings
        spark = self.spark
        if self.errors is None:
            self.errors = error_counter(spark)
        engine = Engine(
            spark,
            settings.namespaces,
            self.spool.log_dir,
            settings.data_dir,
            self.store,
            once=once,
            trigger_seconds=settings.spark.trigger_seconds,
            errors=self.errors,
            lateness=settings.lateness,
            on_batch=self.metrics.on_batch,
            limits=settings.limits,
        )
        return start_queries(engine, planned)

    # -- modes ------------------------------------------------------------------------
    def once(
        self, export_dir: Path | None = None, progress: Callable[[str], None] | None = None
    ) -> dict[str, int]:
        """Poll every source once, process everything pending, export static feeds
        (with ``progress``, a line of what the queries have done about every second)."""
        from roses_app.spark.queries import await_all

        results = self.scheduler.poll_all_once() + self.mail.poll_all_once()
        if self.beats is not None:
            self._close_ended(self.beats)
        failed = [r for r in results if r.status == "error"]
        backing_off = [r for r in results if r.status == "skipped_backoff"]
        self.queries = self.start_queries(once=True)
        await_all(self.queries, progress)
        self._look_at_queries()  # (what the health of a once run tells)
        self._count_late()
        self.spool.compact()
        out = export_dir or self.config.settings.data_dir / "public"
        exported = export_static(self.config, self.store, out)
        return {
            "sources": len(results),
            "failed_sources": len(failed),
            "sources_in_backoff": len(backing_off),
            "items_spooled": self.counters["items_spooled"],
            "rows_written": self.store.written["rows"],
            "files_written": len(exported.files) - exported.unchanged,
            "files_unchanged": exported.unchanged,
        }

    def run(self, stop: threading.Event, reload: threading.Event | None = None) -> None:
        """Serve until ``stop`` is set, then shut down cleanly; read feeds.yaml again
        when ``reload`` is set (SIGHUP) or its files change on disk (see :meth:`reload`)."""
        from roses_app.spark.queries import stop_gracefully

        http = self.config.settings.http
        self.hub = Hub(
            self.current_config, self.store, self.config.settings.data_dir / "websub.sqlite"
        )
        pull = PullQueries(self.current_config, self.spool.root)
        console = None
        if self.history is not None:
            from roses_app.daemon_console import daemon_console

            self.history.start()
            console = daemon_console(self, self.history, self.reload, self.clock)
        app = create_app(
            self.current_config,
            self.store,
            self.health,
            hub=self.hub,
            metrics=self.metrics.exposition,
            pull=pull,
            sources=self.sources_page,
            pushes=None
            if self.subscriber is None
            else (self.subscriber, self.scheduler.pushed, self.config.settings.fetch.max_bytes),
            console=console,
        )
        self.http = HttpServer(app, http.host, http.port)
        self.http.start()
        try:
            self.hub.start(self.http.url)
            # Sources are polled while Spark's JVM starts (seconds): the first
            # micro-batch then has the first items instead of the trigger after it.
            self.scheduler.start()
            self.mail.start()
            with self._serial:
                self.queries = self.start_queries(once=False)
                self._look_at_queries()
            compacted = time.monotonic()
            self.collections.start()
            while not stop.wait(1.0):
                self._reload_if_asked(reload)
                with self._serial:  # (a reload asked by the console waits for this)
                    compacted = self._tick(compacted)
                self.collections.tick()
        finally:
            self.collections.stop()
            log.info("stopping: finishing polls and the batch in flight")
            self.scheduler.shutdown(wait=True)
            self.mail.shutdown(wait=True)
            stop_gracefully(self.queries, STOP_BATCH_SECONDS)
            self.hub.stop()
            self.http.stop()
            self.close()
            log.info("stopped")

    def _tick(self, compacted: float) -> float:
        """The loop's work each second; returns when the spool was last compacted."""
        self._check_queries()
        self._look_at_queries()
        self._count_late()
        if self.beats is not None:
            self._heartbeat(self.beats)
        if time.monotonic() - compacted >= self.config.settings.compact_every_seconds:
            compacted = time.monotonic()
            self._rebase_stateless()
            merged = self.spool.compact()
            if merged:
                log.info("spool: merged %d archived file(s)", merged)
        return compacted

    # -- reloading the config ----------------------------------------------------------
    def reload(self, reason: str) -> ReloadResult:
        """Read feeds.yaml again and apply it without a restart, one reload at a time,
        from any thread (see :mod:`roses_app.daemon_reload`); a config that does not
        load is logged, each problem at file:line, and the running one kept."""
        with self._serial:
            return reload_daemon(self, reason)

    def _reload_if_asked(self, asked: threading.Event | None) -> None:
        if asked is not None and asked.is_set():
            asked.clear()
            self.reload("SIGHUP")
        elif self.watcher.due():
            self.reload("the config's files changed on disk")

    def current_config(self) -> Config:
        """The config running now (the HTTP server and the hub ask it at each request)."""
        return self.config

    def use_config(self, config: Config) -> None:
        """Run ``config`` from now on (its streams' queries: :meth:`restart_queries`)."""
        self.config = config  # one reference swapped: every reader sees one or the other
        budget.configure(config.settings.limits.item_seconds)
        self.beats = heartbeat_plan(self.streams())

    def restart_queries(self) -> None:
        """Stop the queries after their batch in flight, start the config's (same JVM)."""
        from roses_app.spark.queries import stop_gracefully

        with self._serial:
            stop_gracefully(self.queries, STOP_BATCH_SECONDS)
            self.queries = []
            self._restarts.clear()
            self.queries = self.start_queries(once=False)
            self._look_at_queries()

    def _check_queries(self) -> None:
        """Restart a stream whose query died, from its checkpoint, with backoff.

        A query that fails again at once waits twice as long each time (at most
        ``MAX_RESTART_DELAY``), so a deterministic failure does not spin.
        """
        now = time.monotonic()
        for running in self.queries:
            if running.query.isActive:
                continue
            delay, not_before = self._restarts.get(running.name, (0.0, 0.0))
            if now < not_before:
                continue
            delay = min(MAX_RESTART_DELAY, max(1.0, delay * 2))
            self._restarts[running.name] = (delay, now + delay)
            with self._lock:
                self.counters["query_restarts"] += 1
            log.error(
                "query %s stopped (%s); restarting it from its checkpoint (next retry in %.0fs)",
                running.name,
                running.query.exception(),
                delay,
            )
            running.query = running.restart()

    def _rebase_stateless(self) -> None:
        """Keep the stateless query's checkpoint from growing with uptime (see
        :mod:`roses_app.spark.fresh_checkpoint`)."""
        from roses_app.spark.fresh_checkpoint import rebase_running

        checkpoints = self.config.settings.data_dir / "checkpoints"
        if rebase_running(checkpoints, self.spool.log_dir, self.store, self.queries):
            with self._lock:
                self.counters["stateless_rebases"] += 1

    def _heartbeat(self, beats: HeartbeatPlan) -> None:
        """Let time pass for the queries while time can still change a result (see
        :mod:`roses_app.algebra.planner.heartbeats`)."""
        due = self._due(beats)
        if due is not None and self.spool.next_ts() >= due:
            self.spool.heartbeat()

    def _close_ended(self, beats: HeartbeatPlan) -> None:
        """Before a ``once`` run: a heartbeat now, so that what has ended by now comes
        out in this run (not the daemon's interval later); none once time alone can no
        longer change a result (a heartbeat past the last item's horizon was written):
        it would cost every query a micro-batch, seconds each, for nothing."""
        if self._due(beats) is not None:
            self.spool.heartbeat()

    def _due(self, beats: HeartbeatPlan) -> int | None:
        """When the spool's next heartbeat is due; None once time alone can no longer
        change a result."""
        lateness = self.config.settings.lateness
        return beats.next_due(self.spool.last_item_ts(), self.spool.last_ts(), lateness)

    def close(self) -> None:
        self.mail.close()
        if self.history is not None:
            self.history.close()
        if self.push_table is not None:
            self.push_table.close()
        self.states.close()
        self.spool.close()
        self.store.close()
        self.folder_lock.release()
