"""What keeps a hostile server from holding a fetch or the daemon's memory, against real
servers on 127.0.0.1: the deadline over a whole fetch (headers dribbled one byte at a
time), bounded decoding of stacked content codings (a gzip bomb inside a gzip bomb),
and ``file:`` sources that are not regular files (a named pipe would block forever)."""

from __future__ import annotations

import gzip
import os
import struct
import threading
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from raw_http_support import RawReply, RawServer
from test_connector_support import FeedServer, Reply, rss

from roses_app.config.model import FetchSettings
from roses_app.connectors.fetch import Fetcher
from roses_app.connectors.limits import MAX_CODINGS, FetchTimeoutError
from roses_app.errors import FetchError

BODY = rss(("a", "First"), ("b", "Second"))
SETTINGS = FetchSettings(timeout_seconds=2.0, max_bytes=64 * 1024, user_agent="ROSES-test/1.0")


@pytest.fixture
def fetcher() -> Fetcher:
    with Fetcher(SETTINGS) as f:
        yield f


# -- the deadline ------------------------------------------------------------------------


def test_dribbled_headers_end_at_the_deadline(raw_server: RawServer):
    # One header byte every 0.2 s, forever: each read succeeds well within any read
    # timeout, so only a deadline over the whole fetch ends it.
    raw_server.routes["/slow"] = RawReply(b"HTTP/1.1 200 OK\r\nX-Slow: ", dribble=0.2)
    started = time.monotonic()
    with (
        Fetcher(FetchSettings(timeout_seconds=1.0)) as fetcher,
        pytest.raises(FetchTimeoutError) as info,
    ):
        fetcher.fetch(raw_server.url("/slow"))
    elapsed = time.monotonic() - started
    assert "did not finish within 1 s" in str(info.value) and "headers" in str(info.value)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, FetchError)
    assert 0.9 <= elapsed < 5.0  # at its deadline, not before, and not whenever the server stops
    assert len(raw_server.closed("/slow")) == 1  # the client hung up; the server never stops


def test_the_deadline_covers_every_redirect_hop(raw_server: RawServer):
    # each hop answers at once, but the last one dribbles: the deadline is shared
    raw_server.routes["/a"] = RawReply(
        b"HTTP/1.1 302 Found\r\nLocation: /b\r\nContent-Length: 0\r\n\r\n"
    )
    raw_server.routes["/b"] = RawReply(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/rss+xml\r\nConnection: close\r\n\r\n<rss>",
        dribble=0.2,
    )
    fetcher = Fetcher(FetchSettings(timeout_seconds=1.0))
    with fetcher, pytest.raises(FetchTimeoutError, match="did not finish"):
        fetcher.fetch(raw_server.url("/a"))
    assert [c.path for c in raw_server.connections()] == ["/a", "/b"]


def test_dribbling_servers_do_not_hold_other_fetches(
    raw_server: RawServer, feed_server: FeedServer
):
    # one Fetcher is shared by every poll thread: a hung fetch must not block the rest
    raw_server.routes["/slow"] = RawReply(b"HTTP/1.1 200 OK\r\nX-Slow: ", dribble=0.2)
    feed_server.routes["/feed"] = Reply(200, BODY)
    with Fetcher(FetchSettings(timeout_seconds=3.0)) as fetcher:
        errors: list[BaseException] = []

        def slow() -> None:
            try:
                fetcher.fetch(raw_server.url("/slow"))
            except FetchError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=slow) for _ in range(3)]
        for thread in threads:
            thread.start()
        while len(raw_server.connections("/slow")) < 3:
            time.sleep(0.01)
        assert fetcher.fetch(feed_server.url("/feed")).body == BODY
        assert all(c.closed is None for c in raw_server.connections("/slow"))  # still hung
        for thread in threads:
            thread.join()
    assert len(errors) == 3 and all(isinstance(e, FetchTimeoutError) for e in errors)


# -- content codings -----------------------------------------------------------------


MB = 1024 * 1024


def gzip_of_zeros(megabytes: int) -> bytes:
    """One gzip member holding ``megabytes`` MB of zeros, built in about 0.4 s per GB.

    After a full flush deflate starts afresh, so every 1 MB of zeros compresses to
    the same block: the stream is that block repeated, then the end and the trailer.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(MB)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()
    crc = 0
    for _ in range(megabytes):
        crc = zlib.crc32(zeros, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, (megabytes * MB) & 0xFFFFFFFF)
    return header + block * megabytes + end + trailer


def test_gzip_of_zeros_is_a_real_gzip_stream():
    assert gzip.decompress(gzip_of_zeros(3)) == bytes(3 * MB)


def test_stacked_gzip_bomb_is_refused_in_bounded_memory(feed_server: FeedServer):
    inside = gzip_of_zeros(1024)  # 1 GB of zeros in about 1 MB ...
    bomb = gzip.compress(inside, 9)  # ... in a few KB, the way the 1,898 bytes did
    assert len(bomb) < 16 * 1024
    cap = 4 * MB
    feed_server.routes["/bomb"] = Reply(200, bomb, {"Content-Encoding": "gzip, gzip"})
    with Fetcher(FetchSettings(timeout_seconds=30.0, max_bytes=cap)) as fetcher:
        tracemalloc.start()
        try:
            with pytest.raises(FetchError, match="max_bytes") as info:
                fetcher.fetch(feed_server.url("/bomb"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert "more than 4194304 bytes" in str(info.value)
    # what is held: the decoded bytes up to the cap, plus a few steps per layer
    assert peak < 3 * cap, f"peak {peak / MB:.1f} MB for a cap of {cap / MB:.0f} MB"


def test_gzip_inside_deflate_bomb_is_refused(feed_server: FeedServer):
    inside = gzip_of_zeros(256)
    bomb = zlib.compress(inside, 9)
    feed_server.routes["/bomb"] = Reply(200, bomb, {"Content-Encoding": "gzip, deflate"})
    with pytest.raises(FetchError, match="max_bytes"):
        Fetcher(SETTINGS).fetch(feed_server.url("/bomb"))


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 says
        ("deflate", _raw_deflate),  # raw, as some servers send
        ("gzip, gzip", lambda b: gzip.compress(gzip.compress(b))),
        ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),
        ("identity, gzip", gzip.compress),
        ("gzip", lambda b: gzip.compress(b[:100]) + gzip.compress(b[100:])),  # two members
    ],
    ids=[
        "gzip",
        "x-gzip",
        "deflate",
        "raw-deflate",
        "gzip2",
        "deflate-gzip",
        "identity",
        "members",
    ],
)
def test_content_codings_are_decoded(feed_server: FeedServer, fetcher: Fetcher, coding, encode):
    body = BODY * 50  # several decoding steps
    feed_server.routes["/feed"] = Reply(200, encode(body), {"Content-Encoding": coding})
    assert fetcher.fetch(feed_server.url("/feed")).body == body


def test_unrequested_or_too_many_codings_are_refused(feed_server: FeedServer, fetcher: Fetcher):
    feed_server.routes["/br"] = Reply(200, b"\x0b\x02\x80hello\x03", {"Content-Encoding": "br"})
    with pytest.raises(FetchError, match=r"'br'.*gzip and deflate"):
        fetcher.fetch(feed_server.url("/br"))
    many = ", ".join(["gzip"] * (MAX_CODINGS + 1))
    feed_server.routes["/many"] = Reply(200, BODY, {"Content-Encoding": many})
    with pytest.raises(FetchError, match="stacks 5 content codings"):
        fetcher.fetch(feed_server.url("/many"))


# -- file: sources that are not files ---------------------------------------------------


def test_named_pipe_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "feed.xml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def fetch() -> None:
        with Fetcher(SETTINGS) as fetcher:
            try:
                fetcher.fetch(fifo.as_uri())
            except FetchError as exc:
                outcome.append(exc)

    # a thread, so that a regression (open() waiting for a writer) fails instead of hanging
    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    thread.join(10.0)
    if thread.is_alive():
        with open(fifo, "wb"):  # let the blocked reader go before failing
            pass
        pytest.fail("fetching a named pipe blocked")
    (error,) = outcome
    assert "is a named pipe, not a regular file" in str(error)


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/null", "a character device"), (".", "a directory")]
)
def test_devices_and_directories_are_refused(tmp_path: Path, path: str, kind: str):
    target = Path(path) if path.startswith("/") else tmp_path
    with Fetcher(SETTINGS) as fetcher, pytest.raises(FetchError) as info:
        fetcher.fetch(target.as_uri())
    assert f"is {kind}, not a regular file" in str(info.value)
