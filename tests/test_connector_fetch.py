"""Fetcher against a real HTTP server on 127.0.0.1, and file: URLs."""

from __future__ import annotations

import email.utils
import gzip
import socket
import time
from pathlib import Path

import pytest
from test_connector_support import FakeClock, FeedServer, Reply, conditional, rss

from roses_app.config.model import FetchSettings
from roses_app.connectors.fetch import (
    MAX_REDIRECTS,
    Fetcher,
    HttpStatusError,
    RetryLaterError,
    file_path_of,
    parse_retry_after,
)
from roses_app.connectors.limits import FetchTimeoutError
from roses_app.errors import FetchError

BODY = rss(("a", "First"), ("b", "Second"))
SETTINGS = FetchSettings(timeout_seconds=2.0, max_bytes=64 * 1024, user_agent="ROSES-test/1.0")


@pytest.fixture
def fetcher() -> Fetcher:
    with Fetcher(SETTINGS, FakeClock()) as f:
        yield f


def test_plain_get_sends_user_agent_accept_and_gzip(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(200, BODY, {"Content-Type": "application/rss+xml"})
    result = fetcher.fetch(feed_server.url("/feed"))
    assert result.status == 200 and result.body == BODY
    assert not result.not_modified and not result.gone and result.permanent_url is None
    assert result.headers["content-type"] == "application/rss+xml"
    (request,) = feed_server.requests
    assert request.headers["user-agent"] == "ROSES-test/1.0"
    assert "gzip" in request.headers["accept-encoding"]
    assert "application/rss+xml" in request.headers["accept"]
    assert "if-none-match" not in request.headers and "if-modified-since" not in request.headers


def test_etag_conditional_get_gives_304(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = conditional(BODY, etag='"v1"')
    first = fetcher.fetch(feed_server.url("/feed"))
    assert first.status == 200 and first.etag == '"v1"'
    second = fetcher.fetch(feed_server.url("/feed"), etag=first.etag)
    assert second.not_modified and second.body == b""
    assert feed_server.requests[1].headers["if-none-match"] == '"v1"'


def test_last_modified_conditional_get_gives_304(feed_server: FeedServer, fetcher: Fetcher):
    stamp = "Tue, 10 Jun 2003 04:00:00 GMT"
    feed_server.routes["/feed"] = conditional(BODY, last_modified=stamp)
    first = fetcher.fetch(feed_server.url("/feed"))
    assert first.last_modified == stamp and first.etag is None
    second = fetcher.fetch(feed_server.url("/feed"), last_modified=first.last_modified)
    assert second.not_modified
    assert feed_server.requests[1].headers["if-modified-since"] == stamp


def test_gzip_body_is_decoded(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(200, BODY, gzip=True)
    assert fetcher.fetch(feed_server.url("/feed")).body == BODY


def test_301_is_permanent_and_reported(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/old"] = Reply(301, headers={"Location": "/new"})
    feed_server.routes["/new"] = Reply(200, BODY)
    result = fetcher.fetch(feed_server.url("/old"))
    assert result.body == BODY
    assert result.url == feed_server.url("/new")
    assert result.permanent_url == feed_server.url("/new")


def test_308_is_permanent_too(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/old"] = Reply(308, headers={"Location": feed_server.url("/new")})
    feed_server.routes["/new"] = Reply(200, BODY)
    assert fetcher.fetch(feed_server.url("/old")).permanent_url == feed_server.url("/new")


@pytest.mark.parametrize("status", [302, 303, 307])
def test_temporary_redirects_do_not_move_the_source(
    feed_server: FeedServer, fetcher: Fetcher, status: int
):
    feed_server.routes["/old"] = Reply(status, headers={"Location": "/new"})
    feed_server.routes["/new"] = Reply(200, BODY)
    result = fetcher.fetch(feed_server.url("/old"))
    assert result.body == BODY and result.permanent_url is None


def test_permanent_prefix_of_a_redirect_chain_is_kept(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/a"] = Reply(301, headers={"Location": "/b"})
    feed_server.routes["/b"] = Reply(302, headers={"Location": "/c"})
    feed_server.routes["/c"] = Reply(200, BODY)
    result = fetcher.fetch(feed_server.url("/a"))
    assert result.url == feed_server.url("/c")
    assert result.permanent_url == feed_server.url("/b")


def test_permanent_after_temporary_is_not_stored(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/a"] = Reply(302, headers={"Location": "/b"})
    feed_server.routes["/b"] = Reply(301, headers={"Location": "/c"})
    feed_server.routes["/c"] = Reply(200, BODY)
    assert fetcher.fetch(feed_server.url("/a")).permanent_url is None


def test_conditional_headers_follow_redirects(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/old"] = Reply(301, headers={"Location": "/new"})
    feed_server.routes["/new"] = conditional(BODY, etag='"x"')
    result = fetcher.fetch(feed_server.url("/old"), etag='"x"')
    assert result.not_modified and result.permanent_url == feed_server.url("/new")


def test_too_many_redirects(feed_server: FeedServer, fetcher: Fetcher):
    for i in range(MAX_REDIRECTS + 2):
        feed_server.routes[f"/r{i}"] = Reply(302, headers={"Location": f"/r{i + 1}"})
    with pytest.raises(FetchError, match="redirects"):
        fetcher.fetch(feed_server.url("/r0"))
    assert len(feed_server.requests) == MAX_REDIRECTS + 1


def test_exactly_max_redirects_is_fine(feed_server: FeedServer, fetcher: Fetcher):
    for i in range(MAX_REDIRECTS):
        feed_server.routes[f"/r{i}"] = Reply(307, headers={"Location": f"/r{i + 1}"})
    feed_server.routes[f"/r{MAX_REDIRECTS}"] = Reply(200, BODY)
    assert fetcher.fetch(feed_server.url("/r0")).body == BODY


def test_redirect_without_location_is_an_error(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(302)
    with pytest.raises(HttpStatusError, match="Location"):
        fetcher.fetch(feed_server.url("/feed"))


def test_redirect_to_a_file_url_is_refused(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(301, headers={"Location": "file:///etc/passwd"})
    with pytest.raises(FetchError, match="not http"):
        fetcher.fetch(feed_server.url("/feed"))


@pytest.mark.parametrize("location", ["http://[::1", "http://exa mple.org:99999999/"])
def test_redirect_to_an_invalid_url_is_a_fetch_error(
    feed_server: FeedServer, fetcher: Fetcher, location: str
):
    feed_server.routes["/feed"] = Reply(301, headers={"Location": location})
    with pytest.raises(FetchError):
        fetcher.fetch(feed_server.url("/feed"))


def test_410_gone(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(410, b"gone")
    result = fetcher.fetch(feed_server.url("/feed"))
    assert result.gone and result.body == b""


def test_429_with_retry_after_seconds(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(429, b"slow down", {"Retry-After": "120"})
    with pytest.raises(RetryLaterError) as info:
        fetcher.fetch(feed_server.url("/feed"))
    assert info.value.status == 429 and info.value.retry_after == 120.0
    assert isinstance(info.value, FetchError)


def test_503_with_retry_after_http_date(feed_server: FeedServer):
    clock = FakeClock(1_700_000_000.0)
    when = email.utils.formatdate(clock.now + 3600, usegmt=True)
    feed_server.routes["/feed"] = Reply(503, b"", {"Retry-After": when})
    with Fetcher(SETTINGS, clock) as fetcher, pytest.raises(RetryLaterError) as info:
        fetcher.fetch(feed_server.url("/feed"))
    assert info.value.status == 503 and info.value.retry_after == pytest.approx(3600.0)


def test_503_without_retry_after(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/feed"] = Reply(503, b"")
    with pytest.raises(RetryLaterError) as info:
        fetcher.fetch(feed_server.url("/feed"))
    assert info.value.retry_after is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 500, 502])
def test_other_errors_raise_fetch_error(feed_server: FeedServer, fetcher: Fetcher, status: int):
    feed_server.routes["/feed"] = Reply(status, b"no")
    with pytest.raises(HttpStatusError) as info:
        fetcher.fetch(feed_server.url("/feed"))
    assert info.value.status == status and str(status) in str(info.value)


def test_slow_response_times_out(feed_server: FeedServer):
    feed_server.routes["/slow"] = Reply(200, BODY, delay=3.0)
    settings = FetchSettings(timeout_seconds=0.5)
    started = time.monotonic()
    with Fetcher(settings) as fetcher, pytest.raises(FetchTimeoutError, match="timed out"):
        fetcher.fetch(feed_server.url("/slow"))
    assert time.monotonic() - started < 2.0


def test_trickling_body_hits_the_total_deadline(feed_server: FeedServer):
    # each byte arrives within the read timeout, but the whole body would take ~10 s
    feed_server.routes["/trickle"] = Reply(200, b"x" * 200, trickle=0.05)
    settings = FetchSettings(timeout_seconds=0.25)
    started = time.monotonic()
    with Fetcher(settings) as fetcher, pytest.raises(FetchError, match="did not finish"):
        fetcher.fetch(feed_server.url("/trickle"))
    assert time.monotonic() - started < 3.0


def test_huge_body_is_cut_off_while_streaming(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/huge"] = Reply(200, b"x" * (2 * 1024 * 1024), content_length=False)
    with pytest.raises(FetchError, match="max_bytes"):
        fetcher.fetch(feed_server.url("/huge"))


def test_huge_content_length_is_refused_before_reading(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/huge"] = Reply(200, b"x" * (1024 * 1024))
    with pytest.raises(FetchError, match="announces"):
        fetcher.fetch(feed_server.url("/huge"))


def test_gzip_bomb_is_cut_off(feed_server: FeedServer, fetcher: Fetcher):
    bomb = b"\0" * (8 * 1024 * 1024)
    assert len(gzip.compress(bomb)) < SETTINGS.max_bytes
    feed_server.routes["/bomb"] = Reply(200, bomb, gzip=True)
    with pytest.raises(FetchError, match="max_bytes"):
        fetcher.fetch(feed_server.url("/bomb"))


def test_body_at_the_cap_is_accepted(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/exact"] = Reply(200, b"y" * SETTINGS.max_bytes, content_length=False)
    assert len(fetcher.fetch(feed_server.url("/exact")).body) == SETTINGS.max_bytes


def test_corrupt_gzip_is_a_fetch_error(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/bad"] = Reply(200, b"this is not gzip", {"Content-Encoding": "gzip"})
    with pytest.raises(FetchError, match="gzip body is corrupt"):
        fetcher.fetch(feed_server.url("/bad"))


def test_connection_refused_is_a_fetch_error(fetcher: Fetcher):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(FetchError, match="ConnectError"):
        fetcher.fetch(f"http://127.0.0.1:{port}/feed")


def test_unsupported_scheme(fetcher: Fetcher):
    with pytest.raises(FetchError, match="scheme"):
        fetcher.fetch("ftp://example.org/feed.xml")


# -- file: -------------------------------------------------------------------------------


def test_file_urls_absolute_and_relative(tmp_path: Path):
    feed = tmp_path / "sub dir" / "feed.xml"
    feed.parent.mkdir()
    feed.write_bytes(BODY)
    with Fetcher(SETTINGS, base_dir=tmp_path) as fetcher:
        for url in (feed.as_uri(), f"file:{feed}", "file:sub%20dir/feed.xml"):
            result = fetcher.fetch(url)
            assert result.status == 200 and result.body == BODY, url
            assert result.etag and result.last_modified


def test_file_path_of():
    assert file_path_of("file:///a/b%20c.xml") == Path("/a/b c.xml")
    assert file_path_of("file://localhost/a.xml") == Path("/a.xml")
    assert file_path_of("file:x/y.xml", Path("/base")) == Path("/base/x/y.xml")
    with pytest.raises(FetchError, match="remote host"):
        file_path_of("file://server/share/a.xml")


def test_unchanged_file_is_not_modified(tmp_path: Path):
    feed = tmp_path / "feed.xml"
    feed.write_bytes(BODY)
    with Fetcher(SETTINGS) as fetcher:
        first = fetcher.fetch(feed.as_uri())
        assert fetcher.fetch(feed.as_uri(), etag=first.etag).not_modified
        feed.write_bytes(BODY + b"\n")
        assert fetcher.fetch(feed.as_uri(), etag=first.etag).status == 200


def test_missing_and_oversized_files(tmp_path: Path):
    with Fetcher(SETTINGS) as fetcher:
        with pytest.raises(FetchError, match="cannot read"):
            fetcher.fetch((tmp_path / "nope.xml").as_uri())
        big = tmp_path / "big.xml"
        big.write_bytes(b"x" * (SETTINGS.max_bytes + 1))
        with pytest.raises(FetchError, match="max_bytes"):
            fetcher.fetch(big.as_uri())


# -- Retry-After ---------------------------------------------------------------------------


def test_parse_retry_after():
    now = 1_700_000_000.0
    assert parse_retry_after("30", now) == 30.0
    assert parse_retry_after(" 0 ", now) == 0.0
    assert parse_retry_after(None, now) is None
    assert parse_retry_after("", now) is None
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("-5", now) is None
    assert parse_retry_after(email.utils.formatdate(now + 90, usegmt=True), now) == 90.0
    assert parse_retry_after(email.utils.formatdate(now - 90, usegmt=True), now) == 0.0
