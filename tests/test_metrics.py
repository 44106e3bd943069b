"""`/metrics`: what the daemon counts, in Prometheus's text format, over real HTTP."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from roses_app.config import parse_config
from roses_app.connectors.poller import PollResult
from roses_app.daemon import Daemon
from roses_app.publish.server import HttpServer, create_app

CONFIG = """
settings: {data_dir: ./data}
sources:
  a: {feed: "file:a.xml"}
streams:
  all: {filter: {from: a, where: "true()"}, publish: true}
"""


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_scrape_shows_polls_spool_batches_and_the_store(tmp_path: Path) -> None:
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    item = "<item><title>t{}</title><guid>g{}</guid></item>"
    daemon.metrics.on_poll(PollResult("a", "ok", n_items=3, fetch_seconds=0.2))
    daemon.metrics.on_poll(PollResult("a", "error", message="boom"))
    daemon.ingest("a", [(item.format(k, k), None) for k in (1, 2, 3)])
    daemon.ingest("a", [(item.format(k, k), None) for k in (3, 4)])  # 3 was seen
    daemon.metrics.on_batch("stateless", 2, 0.7)
    daemon.store.write_batch("stateless", 0, [("all", "", 1, 1, item.format(1, 1))])
    app = create_app(daemon.config, daemon.store, daemon.health, metrics=daemon.metrics.exposition)
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        response = httpx.get(f"{server.url}/metrics", timeout=10)
    finally:
        server.stop()
        daemon.close()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    got = _samples(response.text)
    a = (("source", "a"),)
    assert got[("roses_items_polled_total", a)] == 5
    assert got[("roses_items_spooled_total", a)] == 4
    assert got[("roses_items_deduplicated_total", a)] == 1
    assert got[("roses_polls_total", (("source", "a"), ("status", "ok")))] == 1
    assert got[("roses_poll_errors_total", a)] == 1
    assert got[("roses_poll_seconds_count", a)] == 1  # the failed poll fetched nothing
    assert got[("roses_batch_seconds_count", (("query", "stateless"),))] == 1
    assert got[("roses_batch_rows_total", (("query", "stateless"),))] == 2
    assert got[("roses_items_published_total", (("stream", "all"),))] == 1
    assert got[("roses_spool_files", ())] == 2
    assert got[("roses_spool_bytes", ())] > 0 and got[("roses_store_bytes", ())] > 0
