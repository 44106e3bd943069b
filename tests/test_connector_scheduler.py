"""FeedScheduler: APScheduler jobs in real time against a real HTTP server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_connector_support import FeedServer, Reply, rss

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Poller, PollResult
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import StateStore

BODY = rss(("a", "One"), ("b", "Two"))


class CountingSink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[str] = []

    def __call__(self, source: str, items: list[tuple[str, int | None]]) -> None:
        with self.lock:
            self.calls.append(source)


@pytest.fixture
def poller(tmp_path: Path) -> Iterator[Poller]:
    store = StateStore(tmp_path / "state.sqlite")
    p = Poller(store, FetchSettings(timeout_seconds=3.0), time.time, CountingSink())
    yield p
    p.close()
    store.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_first_poll_right_away_then_repeated_and_failures_isolated(
    feed_server: FeedServer, poller: Poller
):
    feed_server.routes["/good"] = Reply(200, BODY)
    feed_server.routes["/bad"] = Reply(500)
    sources = {
        "good": FeedSource("good", feed_server.url("/good"), 0.3),
        "bad": FeedSource("bad", feed_server.url("/bad"), 0.3),
    }
    scheduler = FeedScheduler(poller, sources)
    started = time.monotonic()
    scheduler.start()
    try:
        wait_for(lambda: len(feed_server.hits("/good")) >= 1 and len(feed_server.hits("/bad")) >= 1)
        assert time.monotonic() - started < 1.0  # no waiting for the first interval
        wait_for(lambda: len(feed_server.hits("/good")) >= 4)
        wait_for(lambda: len(feed_server.hits("/bad")) >= 2)
    finally:
        scheduler.shutdown(wait=True)
    n_good = len(feed_server.hits("/good"))
    time.sleep(0.5)
    assert len(feed_server.hits("/good")) == n_good  # stopped
    assert not scheduler.running
    state = poller.state_store.get("bad")
    assert state is not None and state.n_errors >= 2
    good = poller.state_store.get("good")
    assert good is not None and good.n_ok >= 4 and good.n_errors == 0
    assert scheduler.last_results["bad"][1].status in ("error", "skipped_backoff")


def test_jobs_are_jittered_single_instance_and_coalesced(feed_server: FeedServer, poller: Poller):
    sources = [FeedSource("a", feed_server.url("/a"), 600.0)]
    scheduler = FeedScheduler(poller, sources)
    scheduler.start()
    try:
        assert scheduler._scheduler is not None
        (job,) = scheduler._scheduler.get_jobs()
        assert job.id == "feed:a"
        assert job.max_instances == 1 and job.coalesce is True
        assert job.trigger.interval.total_seconds() == 600.0
        assert job.trigger.jitter == pytest.approx(60.0)
        with pytest.raises(RuntimeError):
            scheduler.start()
    finally:
        scheduler.shutdown()


def test_poll_all_once_returns_every_source_in_order(
    feed_server: FeedServer, poller: Poller, tmp_path: Path
):
    feed_server.routes["/ok"] = Reply(200, BODY)
    feed_server.routes["/slow"] = Reply(200, BODY, delay=0.5)
    feed_server.routes["/gone"] = Reply(410)
    local = tmp_path / "local.xml"
    local.write_bytes(BODY)
    sources = [
        FeedSource("slow", feed_server.url("/slow"), 60),
        FeedSource("ok", feed_server.url("/ok"), 60),
        FeedSource("gone", feed_server.url("/gone"), 60),
        FeedSource("missing", feed_server.url("/missing"), 60),
        FeedSource("local", local.as_uri(), 60),
    ]
    results = FeedScheduler(poller, sources).poll_all_once()
    assert [r.source for r in results] == ["slow", "ok", "gone", "missing", "local"]
    assert [r.status for r in results] == ["ok", "ok", "gone", "error", "ok"]
    assert sorted(poller.sink.calls) == ["local", "ok", "slow"]  # type: ignore[attr-defined]


def test_shutdown_waits_for_the_poll_in_flight(feed_server: FeedServer, poller: Poller):
    feed_server.routes["/slow"] = Reply(200, BODY, delay=0.8)
    scheduler = FeedScheduler(poller, [FeedSource("slow", feed_server.url("/slow"), 600)])
    scheduler.start()
    wait_for(lambda: len(feed_server.hits("/slow")) == 1)
    scheduler.shutdown(wait=True)
    assert scheduler.last_results["slow"][1].status == "ok"


def test_a_failing_result_hook_is_contained(feed_server: FeedServer, poller: Poller):
    feed_server.routes["/ok"] = Reply(200, BODY)
    seen: list[PollResult] = []

    def hook(result: PollResult) -> None:
        seen.append(result)
        raise ValueError("hook bug")

    scheduler = FeedScheduler(
        poller, [FeedSource("ok", feed_server.url("/ok"), 60)], on_result=hook
    )
    (result,) = scheduler.poll_all_once()
    assert result.status == "ok" and seen == [result]


def test_no_sources():
    class NoPoller:
        pass

    scheduler = FeedScheduler(NoPoller(), [])  # type: ignore[arg-type]
    assert scheduler.poll_all_once() == []
    scheduler.shutdown()
