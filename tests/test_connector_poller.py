"""Poller: conditional GET, redirects, 410, backoff, Retry-After, bad input, sink failures.

Every test drives a real HTTP server on 127.0.0.1 and a fake clock.
"""

from __future__ import annotations

import logging
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


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (
            b"<!DOCTYPE html><html><head><title>Oops</title></head><body>Hi</body></html>",
            "text/html",
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image/png"),
        (b'{"version": "https://jsonfeed.org/version/1"}', "application/json"),
        (b"", "application/rss+xml"),
        (b"<<<>>> &&& not xml", "application/xml"),
    ],
    ids=["html", "binary", "json", "empty", "garbage"],
)
def test_non_feeds_are_errors_with_backoff(rig: Rig, body: bytes, content_type: str, caplog):
    rig.server.routes["/feed"] = Reply(200, body, {"Content-Type": content_type})
    with caplog.at_level(logging.WARNING, logger="roses_app.connectors"):
        result = rig.poller.poll(rig.source("/feed", name="broken-source"))
    assert result.status == "error"
    assert rig.sink.calls == []
    assert any("broken-source" in r.getMessage() for r in caplog.records)
    state = rig.store.get("broken-source")
    assert state is not None and state.failures == 1 and state.last_error


def test_truncated_feed_is_recovered_as_far_as_possible(rig: Rig):
    truncated = BODY[: BODY.index(b"<item>", BODY.index(b"<item>") + 1) + 20]
    rig.server.routes["/feed"] = Reply(200, truncated, {"Content-Type": "application/rss+xml"})
    result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "ok" and result.n_items >= 1
    assert "not well-formed" in result.message
    for xml, _ in rig.sink.calls[0][1]:
        parse_item(xml)


def test_wrong_charset_declaration(rig: Rig):
    # The bytes are ISO-8859-1, the header and the XML declaration both say UTF-8.
    body = (
        '<?xml version="1.0" encoding="utf-8"?><rss version="2.0"><channel>'
        "<title>Caf\xe9</title><item><title>R\xe9sum\xe9 of the day</title>"
        "<guid>x1</guid></item></channel></rss>"
    ).encode("latin-1")
    rig.server.routes["/feed"] = Reply(200, body, {"Content-Type": "text/xml; charset=utf-8"})
    result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "ok" and result.n_items == 1
    item = parse_item(rig.sink.calls[0][1][0][0])
    assert item.findtext("title") == "Résumé of the day"


def test_charset_from_http_header_wins(rig: Rig):
    body = (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>'
        "<item><title>Reykjav\xedk</title><guid>x</guid></item></channel></rss>"
    ).encode("latin-1")
    rig.server.routes["/feed"] = Reply(
        200, body, {"Content-Type": "application/xml; charset=iso-8859-1"}
    )
    assert rig.poller.poll(rig.source("/feed")).status == "ok"
    assert parse_item(rig.sink.calls[0][1][0][0]).findtext("title") == "Reykjavík"


def test_external_entities_are_not_resolved(rig: Rig, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    body = (
        f'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY xxe SYSTEM "{secret.as_uri()}">]>'
        '<rss version="2.0"><channel><title>T</title>'
        "<item><title>a &xxe; b</title><guid>g</guid></item></channel></rss>"
    ).encode()
    rig.server.routes["/feed"] = Reply(200, body, {"Content-Type": "application/rss+xml"})
    rig.poller.poll(rig.source("/feed"))
    for _, items in rig.sink.calls:
        for xml, _ in items:
            assert "TOP-SECRET" not in xml


def test_body_naming_a_local_file_is_not_read(rig: Rig, tmp_path: Path):
    # feedparser.parse(bytes) would open a file of that name; the connector must not.
    secret = tmp_path / "feed.xml"
    secret.write_bytes(rss(("s", "SECRET ITEM")))
    rig.server.routes["/feed"] = Reply(200, str(secret).encode(), {"Content-Type": "text/plain"})
    result = rig.poller.poll(rig.source("/feed"))
    assert result.status == "error" and rig.sink.calls == []


def test_slow_and_huge_sources_are_errors(rig: Rig):
    rig.server.routes["/slow"] = Reply(200, BODY, delay=2.5)
    rig.server.routes["/huge"] = Reply(200, b"<rss>" + b" " * (1024 * 1024), content_length=False)
    slow = rig.poller.poll(rig.source("/slow", name="slow"))
    huge = rig.poller.poll(rig.source("/huge", name="huge"))
    assert slow.status == "error" and "timed out" in slow.message
    assert huge.status == "error" and "max_bytes" in huge.message


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
