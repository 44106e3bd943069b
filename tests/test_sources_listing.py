"""Many sources observable: `/sources` pages, filters and sorts every feed source's
health; `/metrics` and `/healthz` stay small above the per-source limit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from roses_app.config import parse_config
from roses_app.config.model import FeedSource
from roses_app.connectors.listing import Live, Query, page_of, parse_query, rows_of
from roses_app.connectors.poller import PollResult
from roses_app.connectors.refresh import Interval
from roses_app.connectors.state import SourceState, StateStore
from roses_app.daemon import Daemon
from roses_app.metrics import ALL_SOURCES, Metrics
from roses_app.publish.server import HttpServer, create_app


def _store(tmp_path: Path) -> tuple[StateStore, dict[str, FeedSource]]:
    store = StateStore(tmp_path / "s.sqlite")
    sources = {f"feed{n}": FeedSource(f"feed{n}", f"http://h{n % 3}/f{n}", 600.0) for n in range(7)}
    store.put_many(
        [
            SourceState(f"feed{n}", f"http://h{n % 3}/f{n}", f"http://h{n % 3}/f{n}",
                        last_status="error" if n == 2 else "ok", last_error="HTTP 500" if n == 2
                        else "", last_attempt_at=1000.0 + n, n_polls=10, n_not_modified=n,
                        failures=1 if n == 2 else 0, rate_items=float(n), rate_seconds=86400.0)
            for n in range(6)  # feed6: never polled
        ]
    )  # fmt: skip
    return store, sources


LIVE = Live(
    next_poll=lambda name: 2000.0 - int(name[4:]),
    intervals={"feed1": Interval(300.0, "rate 1 items/h: about one new item per poll")},
    lags=lambda name: 0.5 if name == "feed3" else None,
)


def listing(
    store: StateStore, sources: dict[str, FeedSource], live: Live, query: Query
) -> dict[str, Any]:
    """The page ``query`` asks for, of rows read now (the daemon keeps them a while)."""
    return page_of(rows_of(store, sources, live), query)


def test_a_page_of_sources_filtered_and_sorted(tmp_path: Path):
    store, sources = _store(tmp_path)
    with store:
        page = listing(store, sources, LIVE, parse_query({"per_page": "3"}))
        assert page["total"] == 7 and [r["name"] for r in page["sources"]] == [
            "feed0", "feed1", "feed2",
        ]  # fmt: skip
        second = listing(store, sources, LIVE, parse_query({"per_page": "3", "page": "3"}))
        assert [r["name"] for r in second["sources"]] == ["feed6"]
        errors = listing(store, sources, LIVE, parse_query({"status": "error"}))
        (row,) = errors["sources"]
        assert row["name"] == "feed2" and row["last_error"] == "HTTP 500" and row["failures"] == 1
        busiest = listing(store, sources, LIVE, parse_query({"sort": "-items_per_day"}))
        assert [r["name"] for r in busiest["sources"]][:2] == ["feed5", "feed4"]
        assert busiest["sources"][-1]["name"] == "feed6"  # never polled: no rate, last
        host = listing(store, sources, LIVE, parse_query({"q": "H1/"}))
        assert [r["name"] for r in host["sources"]] == ["feed1", "feed4"]
        one = host["sources"][0]
        assert one["interval"] == 300.0 and "items/h" in one["why"]
        assert one["not_modified_share"] == 0.1 and one["next_poll"] == 1999.0
        never = listing(store, sources, LIVE, parse_query({"status": "never"}))
        assert [r["name"] for r in never["sources"]] == ["feed6"]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"sort": "colour"}, "sort must be one of"),
        ({"status": "fine"}, "status must be one of"),
        ({"page": "0"}, "page must be a whole number"),
        ({"per_page": "5000"}, "per_page is at most"),
    ],
)
def test_bad_queries_say_what_is_wrong(params: dict[str, str], message: str):
    with pytest.raises(ValueError, match=message):
        parse_query(params)


def test_above_the_limit_every_source_counts_under_one_label():
    metrics = Metrics(sources=100_000)
    for n in range(2_000):
        metrics.on_poll(PollResult(f"s{n}", "ok", fetch_seconds=0.1, lag_seconds=n / 100))
        metrics.on_ingest(f"s{n}", 2, 1, ages=[30.0])
    started = time.perf_counter()
    body, _ = metrics.exposition()
    took = time.perf_counter() - started
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    polls = [s for s in samples if s.name == "roses_polls_total"]
    assert [(s.labels["source"], s.value) for s in polls] == [(ALL_SOURCES, 2000.0)]
    lag = {
        s.labels.get("le"): s.value for s in samples if s.name == "roses_poll_lag_seconds_bucket"
    }
    assert lag["1.0"] == 101 and lag["+Inf"] == 2000
    fresh = [s for s in samples if s.name == "roses_item_freshness_seconds_count"]
    assert fresh[0].value == 2000
    assert len(body) < 20_000 and took < 1.0  # a few kB, whatever the number of sources


def test_below_the_limit_sources_keep_their_own_series():
    metrics = Metrics(sources=3)
    metrics.on_poll(PollResult("a", "ok"))
    body, _ = metrics.exposition()
    assert b'roses_polls_total{source="a",status="ok"} 1.0' in body


def test_the_daemon_serves_sources_and_a_short_health_at_scale(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("roses_app.metrics.PER_SOURCE_LIMIT", 2)
    monkeypatch.setattr("roses_app.daemon_status.PER_SOURCE_LIMIT", 2)
    monkeypatch.setattr("roses_app.daemon_status.IMPLAUSIBLE_NAMED", 2)
    readings = []

    def counted(*args: Any) -> list[dict[str, Any]]:
        readings.append(1)
        return rows_of(*args)

    monkeypatch.setattr("roses_app.daemon_status.rows_of", counted)
    lines = "\n".join(f'  s{n}: {{feed: "http://127.0.0.1:9/{n}.xml"}}' for n in range(5))
    config = parse_config(
        f"settings: {{data_dir: ./data}}\nsources:\n{lines}\n"
        "streams:\n  all: {filter: {from: s0, where: 'true()'}, publish: true}\n",
        tmp_path / "feeds.yaml",
    )
    daemon = Daemon(config)
    assert not daemon.metrics.per_source
    old = 300_000_000_000_000  # 1979: not believed as a publication date
    polls = [
        (f"s{n}", [(f"<item><guid>{n}-{k}</guid></item>", old) for k in range(n)]) for n in range(5)
    ]
    daemon.ingest_many(polls)
    app = create_app(config, daemon.store, daemon.health, sources=daemon.sources_page)
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        page = httpx.get(f"{server.url}/sources?per_page=2&sort=-name", timeout=10)
        again = httpx.get(f"{server.url}/sources?per_page=2&status=never", timeout=10)
        bad = httpx.get(f"{server.url}/sources?sort=colour", timeout=10)
        health = httpx.get(f"{server.url}/healthz", timeout=10).json()
    finally:
        server.stop()
        daemon.close()
    assert page.status_code == 200
    assert page.json()["total"] == 5
    assert [r["name"] for r in page.json()["sources"]] == ["s4", "s3"]
    assert again.json()["total"] == 5  # none polled yet
    # above the limit the rows are read once and kept a while, not at each request
    assert len(readings) == 1
    assert bad.status_code == 400 and "sort must be one of" in bad.text
    assert health["sources"] == {"see": "/sources", "total": 5}
    # old dates: counted, the sources with most named, not every source
    dates = health["implausible_dates_per_source"]
    assert dates == {"sources": 4, "items": 10, "most": {"s4": 4, "s3": 3}}
