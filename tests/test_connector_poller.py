"""Poller: conditional GET, redirects, 410, backoff, Retry-After, bad input, sink failures.

Every test drives a real HTTP server on 127.0.0.1 and a fake clock.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_connector_support import FakeClock, FeedServer, Reply, conditional, rss

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Poller
from roses_app.connectors.state import StateStore
from roses_app.items import parse_item

EVERY = 600.0
SETTINGS = FetchSettings(timeout_seconds=1.0, max_bytes=256 * 1024, max_backoff_seconds=6 * 3600.0)
BODY = rss(("a", "Volcano erupts"), ("b", "Football final"))


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, int | None]]]] = []
        self.fail = False

    def __call__(self, source: str, items: list[tuple[str, int | None]]) -> None:
        if self.fail:
            raise OSError("disk full")
        self.calls.append((source, items))


class Rig:
    def __init__(self, server: FeedServer, tmp_path: Path) -> None:
        self.server = server
        self.clock = FakeClock()
        self.sink = Sink()
        self.store = StateStore(tmp_path / "state" / "connectors.sqlite")
        self.poller = Poller(self.store, SETTINGS, self.clock, self.sink)

    def source(self, path: str, name: str = "src", every: float = EVERY) -> FeedSource:
        return FeedSource(name, self.server.url(path), every)

    def close(self) -> None:
        self.poller.close()
        self.store.close()


@pytest.fixture
def rig(feed_server: FeedServer, tmp_path: Path) -> Iterator[Rig]:
    r = Rig(feed_server, tmp_path)
    yield r
    r.close()


def test_ok_then_not_modified(rig: Rig):
    rig.server.routes["/feed"] = conditional(
        BODY, etag='"v1"', last_modified="Tue, 10 Jun 2003 04:00:00 GMT"
    )
    src = rig.source("/feed")
    first = rig.poller.poll(src)
    assert first.status == "ok" and first.n_items == 2
    ((name, items),) = rig.sink.calls
    assert name == "src" and len(items) == 2
    for xml, published in items:
        assert parse_item(xml).tag == "item"
        assert published == 1055217600 * 1_000_000
    state = rig.store.get("src")
    assert state is not None
    assert state.etag == '"v1"' and state.last_modified == "Tue, 10 Jun 2003 04:00:00 GMT"
    assert (state.n_polls, state.n_ok, state.n_items) == (1, 1, 2)

    rig.clock.advance(EVERY)
    second = rig.poller.poll(src)
    assert second.status == "not_modified" and second.n_items == 0
    assert len(rig.sink.calls) == 1
    assert rig.server.requests[-1].headers["if-none-match"] == '"v1"'
    state = rig.store.get("src")
    assert state is not None and state.n_not_modified == 1 and state.etag == '"v1"'


def test_state_is_durable(feed_server: FeedServer, tmp_path: Path):
    feed_server.routes["/feed"] = conditional(BODY, etag='"v7"')
    rig = Rig(feed_server, tmp_path)
    rig.poller.poll(rig.source("/feed"))
    rig.close()
    again = Rig(feed_server, tmp_path)  # a new process
    try:
        assert again.poller.poll(again.source("/feed")).status == "not_modified"
        assert again.sink.calls == []
    finally:
        again.close()


def test_exponential_backoff_capped_and_reset(rig: Rig):
    rig.server.routes["/feed"] = Reply(500, b"oops")
    src = rig.source("/feed")
    t0 = rig.clock.now
    first = rig.poller.poll(src)
    assert first.status == "error" and "500" in first.message
    assert first.next_allowed_at == t0 + EVERY

    rig.clock.advance(60)
    skipped = rig.poller.poll(src)
    assert skipped.status == "skipped_backoff"
    assert len(rig.server.requests) == 1  # nothing fetched while backing off

    delays = []
    for _ in range(8):
        state = rig.store.get("src")
        assert state is not None
        rig.clock.now = state.next_allowed_at
        result = rig.poller.poll(src)
        assert result.status == "error"
        delays.append(result.next_allowed_at - rig.clock.now)
    assert delays[:5] == [2 * EVERY, 4 * EVERY, 8 * EVERY, 16 * EVERY, 32 * EVERY]
    assert delays[5:] == [SETTINGS.max_backoff_seconds] * 3
    state = rig.store.get("src")
    assert state is not None and state.failures == 9 and state.n_errors == 9

    rig.server.routes["/feed"] = Reply(200, BODY)
    rig.clock.now = state.next_allowed_at
    assert rig.poller.poll(src).status == "ok"
    state = rig.store.get("src")
    assert state is not None
    assert state.failures == 0 and state.next_allowed_at == 0 and state.last_error == ""


def test_backoff_tolerates_scheduler_jitter_but_not_more(rig: Rig):
    rig.server.routes["/feed"] = Reply(500)
    src = rig.source("/feed")
    rig.poller.poll(src)
    rig.clock.advance(EVERY * 0.85)  # well before the end of the backoff
    assert rig.poller.poll(src).status == "skipped_backoff"
    rig.clock.advance(EVERY * 0.1)  # within 10% of the interval: a jittered run goes ahead
    assert rig.poller.poll(src).status == "error"


def test_force_ignores_backoff(rig: Rig):
    rig.server.routes["/feed"] = Reply(500)
    src = rig.source("/feed")
    rig.poller.poll(src)
    rig.server.routes["/feed"] = Reply(200, BODY)
    assert rig.poller.poll(src).status == "skipped_backoff"
    assert rig.poller.poll(src, force=True).status == "ok"


def test_retry_after_overrides_backoff_exactly(rig: Rig):
    rig.server.routes["/feed"] = Reply(429, b"", {"Retry-After": "7200"})
    src = rig.source("/feed")
    t0 = rig.clock.now
    result = rig.poller.poll(src)
    assert result.status == "error" and "429" in result.message
    assert result.next_allowed_at == t0 + 7200
    rig.clock.now = t0 + 7200 - 1  # no jitter tolerance for a server's Retry-After
    assert rig.poller.poll(src).status == "skipped_backoff"
    rig.clock.now = t0 + 7200
    rig.server.routes["/feed"] = Reply(200, BODY)
    assert rig.poller.poll(src).status == "ok"


def test_retry_after_is_capped(rig: Rig):
    rig.server.routes["/feed"] = Reply(503, b"", {"Retry-After": str(10**9)})
    t0 = rig.clock.now
    result = rig.poller.poll(rig.source("/feed"))
    assert result.next_allowed_at == t0 + SETTINGS.max_backoff_seconds


def test_gone_stops_polling_until_the_url_changes(rig: Rig):
    rig.server.routes["/feed"] = Reply(410)
    src = rig.source("/feed")
    assert rig.poller.poll(src).status == "gone"
    rig.clock.advance(10 * EVERY)
    result = rig.poller.poll(src, force=True)
    assert result.status == "gone" and "410" in result.message
    assert len(rig.server.requests) == 1
    state = rig.store.get("src")
    assert state is not None and state.gone

    rig.server.routes["/feed2"] = Reply(200, BODY)
    assert rig.poller.poll(rig.source("/feed2")).status == "ok"  # feeds.yaml edited
    rig.store.reset("src")
    state = rig.store.get("src")
    assert state is not None and not state.gone and state.n_ok == 1


def test_permanent_redirect_updates_the_stored_url(rig: Rig):
    rig.server.routes["/old"] = Reply(301, headers={"Location": "/new"})
    rig.server.routes["/new"] = conditional(BODY, etag='"n"')
    src = rig.source("/old")
    assert rig.poller.poll(src).status == "ok"
    state = rig.store.get("src")
    assert state is not None and state.url == rig.server.url("/new")
    assert state.configured_url == rig.server.url("/old")
    rig.clock.advance(EVERY)
    assert rig.poller.poll(src).status == "not_modified"
    assert [r.path for r in rig.server.requests] == ["/old", "/new", "/new"]


def test_temporary_redirect_keeps_the_stored_url(rig: Rig):
    rig.server.routes["/old"] = Reply(302, headers={"Location": "/new"})
    rig.server.routes["/new"] = Reply(200, BODY)
    src = rig.source("/old")
    assert rig.poller.poll(src).status == "ok"
    state = rig.store.get("src")
    assert state is not None and state.url == rig.server.url("/old")
    rig.clock.advance(EVERY)
    rig.poller.poll(src)
    assert [r.path for r in rig.server.requests] == ["/old", "/new", "/old", "/new"]


def test_sink_failure_does_not_advance_the_state(rig: Rig):
    rig.server.routes["/feed"] = conditional(BODY, etag='"v1"')
    src = rig.source("/feed")
    rig.sink.fail = True
    result = rig.poller.poll(src)
    assert result.status == "error" and "sink" in result.message
    state = rig.store.get("src")
    assert state is not None and state.etag is None and state.failures == 1
    rig.sink.fail = False
    rig.clock.now = state.next_allowed_at
    assert rig.poller.poll(src).status == "ok"
    assert "if-none-match" not in rig.server.requests[-1].headers  # full refetch
    ((_, items),) = rig.sink.calls
    assert len(items) == 2  # nothing lost


def test_unreachable_source(rig: Rig):
    src = FeedSource("down", "http://127.0.0.1:9/feed", EVERY)
    result = rig.poller.poll(src)
    assert result.status == "error"
    state = rig.store.get("down")
    assert state is not None and state.failures == 1


def test_file_source(tmp_path: Path, rig: Rig):
    feed = tmp_path / "feed.xml"
    feed.write_bytes(BODY)
    src = FeedSource("local", feed.as_uri(), EVERY)
    assert rig.poller.poll(src).status == "ok"
    rig.clock.advance(EVERY)
    assert rig.poller.poll(src).status == "not_modified"
    assert len(rig.sink.calls) == 1


def test_named_pipe_source_is_an_error_not_a_hang(tmp_path: Path, rig: Rig):
    fifo = tmp_path / "feed.xml"
    os.mkfifo(fifo)
    result = rig.poller.poll(FeedSource("pipe", fifo.as_uri(), EVERY))
    assert result.status == "error" and "named pipe, not a regular file" in result.message
    state = rig.store.get("pipe")
    assert state is not None and state.n_errors == 1 and state.last_error == result.message


def test_results_say_how_long_the_fetch_took_and_whether_it_timed_out(rig: Rig):
    rig.server.routes["/feed"] = Reply(200, BODY)
    rig.server.routes["/slow"] = Reply(200, BODY, delay=2.5)  # fetch.timeout is 1 s here
    ok = rig.poller.poll(rig.source("/feed", name="fast"))
    assert ok.fetch_seconds is not None and not ok.timed_out
    slow = rig.poller.poll(rig.source("/slow", name="slow"))
    assert slow.status == "error" and slow.timed_out and "did not finish within 1 s" in slow.message
    assert slow.fetch_seconds is not None and slow.fetch_seconds >= 0.9
    skipped = rig.poller.poll(rig.source("/slow", name="slow"))
    assert skipped.status == "skipped_backoff" and skipped.fetch_seconds is None


def test_empty_feed_is_ok_without_calling_the_sink(rig: Rig):
    rig.server.routes["/feed"] = Reply(200, rss(), {"Content-Type": "application/rss+xml"})
    result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "ok" and result.n_items == 0 and rig.sink.calls == []


def test_poll_never_raises_even_if_the_state_store_breaks(rig: Rig, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("database is locked")

    monkeypatch.setattr(rig.store, "load", broken)
    result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "error" and "database is locked" in result.message


def test_changed_configured_url_starts_over(rig: Rig):
    rig.server.routes["/a"] = Reply(500)
    rig.server.routes["/b"] = Reply(200, BODY)
    rig.poller.poll(rig.source("/a"))
    assert rig.poller.poll(rig.source("/a")).status == "skipped_backoff"
    assert rig.poller.poll(rig.source("/b")).status == "ok"


def test_a_document_of_too_many_entries_gives_its_first_ones(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """What one poll hands the spool is bounded (settings.fetch.max_items), not the
    document."""
    rig.server.routes["/feed"] = conditional(rss(*((f"g{k}", f"item {k}") for k in range(5))))
    settings = dataclasses.replace(SETTINGS, max_items=3)
    rig.poller.close()
    rig.poller = Poller(rig.store, settings, rig.clock, rig.sink)
    with caplog.at_level("WARNING"):
        result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "ok" and result.n_items == 3
    ((_, items),) = rig.sink.calls
    assert [parse_item(xml).findtext("guid") for xml, _ in items] == ["g0", "g1", "g2"]
    assert (
        "source src: the document has 5 entries: the first 3 are taken, the other 2 left out"
        in caplog.text
    )
