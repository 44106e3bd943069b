"""The daemon's Prometheus metrics, served at ``/metrics``.

Two kinds, both in one registry per daemon (tests run several daemons in a process):

* **Events counted as they happen**: polls (per source and outcome), their duration,
  items polled, spooled and deduplicated per source, and each micro-batch's duration
  and rows per query.  The stages report them through :class:`Metrics` methods.
* **Read at scrape time** (:class:`SnapshotCollector`): what other parts already
  count: items published per stream (the store), items dropped per step (Spark's
  accumulator), rows dropped behind the watermark per query (Spark's progress), and
  the sizes of the store and the spool.  Reading them on demand costs nothing
  between scrapes and cannot drift from their source.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from roses_app.connectors.poller import PollResult

# fetches take from milliseconds (file:, a 304) to fetch.timeout (30 s by default)
POLL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LAG_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
INTERVAL_BUCKETS = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 6 * 3600.0, 86400.0)
FRESHNESS_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0, 6 * 3600.0, 86400.0)
PER_SOURCE_LIMIT = 1000  # sources with series of their own; above, one series for all
ALL_SOURCES = "_all"


@dataclass
class Snapshot:
    """What the scrape-time collector reads (see the module docstring)."""

    published: dict[str, int] = field(default_factory=dict)  # stream -> rows written
    dropped: dict[str, int] = field(default_factory=dict)  # step id -> items dropped
    # windows over publication time, per stream: items later than the lateness, and
    # results computed again that had not changed (not published again)
    too_late: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    revised: dict[str, int] = field(default_factory=dict)  # results replacing published ones
    late: dict[str, int] = field(default_factory=dict)  # query -> rows behind the watermark
    store_bytes: int = 0
    spool_bytes: int = 0
    spool_files: int = 0
    # the WebSub hub's stats (Hub.stats): counts of events, and WEBSUB_GAUGES
    websub: dict[str, int] = field(default_factory=dict)


WEBSUB_GAUGES = {
    "subscriptions": "WebSub subscriptions recorded",
    "pending": "WebSub verifications, deliveries and pings not over",
    "verifications_waiting": "WebSub subscription requests waiting for their verification",
}


class SnapshotCollector(Collector):
    """Exposes a :class:`Snapshot` taken at each scrape."""

    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        now = self._snapshot()
        yield _counter(
            "roses_items_published", "Output rows written to the store", "stream", now.published
        )
        yield _counter(
            "roses_items_dropped",
            "Items dropped by a failing XPath/XQuery function, per step",
            "step",
            now.dropped,
        )
        yield _counter(
            "roses_items_too_late",
            "Items later than the allowed lateness of a window, join or windowed grouping "
            "over publication time",
            "stream",
            now.too_late,
        )
        yield _counter(
            "roses_windows_unchanged",
            "Window or windowed grouping results computed again after a late item and not "
            "published again (unchanged)",
            "stream",
            now.unchanged,
        )
        yield _counter(
            "roses_windows_revised",
            "Results published in place of an earlier one (a retraction of it): window "
            "results revised, optimistic join items replaced or withdrawn, windowed "
            "grouping results revised",
            "stream",
            now.revised,
        )
        yield _counter(
            "roses_items_late",
            "Rows dropped by stateful operators because they came behind the watermark",
            "query",
            now.late,
        )
        for name, text, value in (
            ("roses_store_bytes", "Size of the store's database files", now.store_bytes),
            ("roses_spool_bytes", "Size of the spool's event files", now.spool_bytes),
            ("roses_spool_files", "Event files in the spool", now.spool_files),
        ):
            yield GaugeMetricFamily(name, text, value=value)
        yield from _websub(now.websub)


def _websub(stats: dict[str, int]) -> Iterator[Metric]:
    events = {k: v for k, v in stats.items() if k not in WEBSUB_GAUGES}
    yield _counter(
        "roses_websub_events",
        "WebSub hub events: requests (refused, busy: answered 503, capped_topic and "
        "capped_callback_host: new subscriptions past a cap, answered 403), verifications "
        "(verified, unverified), deliveries (delivered, retries, failed: dropped after "
        "the last attempt), callbacks_refused (non-public addresses), pings, errors",
        "event",
        events,
    )
    for key, text in WEBSUB_GAUGES.items():
        if key in stats:
            yield GaugeMetricFamily(f"roses_websub_{key}", text, value=stats[key])


def _counter(name: str, text: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, text, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


class Metrics:
    """One daemon's metrics; the stages call the ``on_*`` methods (thread-safe).

    Per-source series (polls, their time, items) are kept per source only up to
    ``per_source_limit`` sources: above it, as Prometheus advises against unbounded
    label values, every source counts under ``source="_all"`` (a scrape stays small
    at 100,000 sources; ``/sources`` has each source's own figures).  Poll lag,
    intervals and items' freshness are histograms over all sources either way.
    """

    def __init__(
        self,
        snapshot: Callable[[], Snapshot] | None = None,
        *,
        sources: int = 0,
        per_source_limit: int | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        limit = PER_SOURCE_LIMIT if per_source_limit is None else per_source_limit
        self.per_source = sources <= limit
        r = self.registry
        self.polls = Counter(
            "roses_polls", "Polls of a source, by outcome", ["source", "status"], registry=r
        )
        self.poll_errors = Counter("roses_poll_errors", "Polls that failed", ["source"], registry=r)
        self.poll_seconds = Histogram(
            "roses_poll_seconds",
            "Fetch time of a poll",
            ["source"],
            buckets=POLL_BUCKETS,
            registry=r,
        )
        self.polled = Counter(
            "roses_items_polled", "Items read from a source", ["source"], registry=r
        )
        self.spooled = Counter(
            "roses_items_spooled", "New items written to the spool", ["source"], registry=r
        )
        self.deduplicated = Counter(
            "roses_items_deduplicated",
            "Items the spool had already seen (dropped)",
            ["source"],
            registry=r,
        )
        self.poll_lag = Histogram(
            "roses_poll_lag_seconds",
            "How long after its due time a poll started (polls wait for a free slot)",
            buckets=LAG_BUCKETS,
            registry=r,
        )
        self.poll_interval = Histogram(
            "roses_poll_interval_seconds",
            "The interval chosen after each poll (fixed, adaptive or the budget's share)",
            buckets=INTERVAL_BUCKETS,
            registry=r,
        )
        self.freshness = Histogram(
            "roses_item_freshness_seconds",
            "From an item's publication date to its arrival in the spool",
            buckets=FRESHNESS_BUCKETS,
            registry=r,
        )
        self.batch_seconds = Histogram(
            "roses_batch_seconds",
            "Duration of a micro-batch (computing it and writing its output)",
            ["query"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_rows = Counter(
            "roses_batch_rows", "Output rows of micro-batches", ["query"], registry=r
        )
        if snapshot is not None:
            r.register(SnapshotCollector(snapshot))

    def _label(self, source: str) -> str:
        return source if self.per_source else ALL_SOURCES

    def on_poll(self, result: PollResult) -> None:
        source = self._label(result.source)
        self.polls.labels(source, result.status).inc()
        if result.status == "error":
            self.poll_errors.labels(source).inc()
        if result.fetch_seconds is not None:
            self.poll_seconds.labels(source).observe(result.fetch_seconds)
        if result.status != "skipped_backoff":
            self.poll_lag.observe(result.lag_seconds)
        if result.interval_seconds is not None:
            self.poll_interval.observe(result.interval_seconds)

    def on_ingest(self, source: str, polled: int, spooled: int, ages: Iterable[float] = ()) -> None:
        """A poll's items reached the spool: ``spooled`` of ``polled`` were new, and
        ``ages`` are the new ones' seconds since their publication."""
        label = self._label(source)
        self.polled.labels(label).inc(polled)
        self.spooled.labels(label).inc(spooled)
        self.deduplicated.labels(label).inc(polled - spooled)
        for age in ages:
            self.freshness.observe(max(0.0, age))

    def on_batch(self, query: str, rows: int, seconds: float) -> None:
        self.batch_seconds.labels(query).observe(seconds)
        self.batch_rows.labels(query).inc(rows)

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type, for ``GET /metrics``."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
