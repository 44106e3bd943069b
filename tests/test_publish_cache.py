"""The render cache, through the real server: one render per store change and format,
however many readers ask at once, and ``/healthz`` answers while they wait."""

from __future__ import annotations

import asyncio
import gzip
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_publish_server import Clock, item, make_config

from roses_app.publish import HttpServer, create_app
from roses_app.publish.cache import RenderCache, etag_of
from roses_app.store import OutRow, Store, StoredEntry

T0 = 1_700_000_000_000_000
GUARD = 60.0  # seconds: a guard against a hang, not a speed requirement


class GatedStore(Store):
    """A real store whose reads of feed entries wait for :attr:`gate`, and are counted:
    a render is held for as long as a test needs."""

    def __init__(self, path: Path, clock: Clock) -> None:
        super().__init__(path, clock=clock)
        self.gate = threading.Event()
        self.gate.set()
        self.reads = 0
        self.reading = threading.Event()

    def latest(self, stream: str, part: str = "", limit: int = 50) -> list[StoredEntry]:
        self.reads += 1
        self.reading.set()
        if not self.gate.wait(GUARD):
            raise TimeoutError("the test never opened the gate")
        return super().latest(stream, part, limit)


class Served:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.store = GatedStore(tmp_path / "store.sqlite", self.clock)
        self.cache = RenderCache()
        app = create_app(make_config(tmp_path), self.store, lambda: {"ok": True}, cache=self.cache)
        self.server = HttpServer(app, "127.0.0.1", 0)
        self.server.start()
        self.batch = 0

    def write(self, rows: list[OutRow]) -> None:
        self.clock.t += 10
        self.store.write_batch("q", self.batch, rows)
        self.batch += 1

    def close(self) -> None:
        self.store.gate.set()
        self.server.stop()
        self.store.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    yield s
    s.close()


def news_rows(ns: range, size: int = 0, stream: str = "news") -> list[OutRow]:
    padding = "x" * size
    return [OutRow(stream, "", T0 + n * 1_000_000, 0, item(n, f"Item {n} {padding}")) for n in ns]


async def burst(url: str, paths: list[str], *, gzip_only: bool = False) -> list[httpx.Response]:
    """GET every path at once; half of them (every other pair) accept gzip, or all."""
    limits = httpx.Limits(max_connections=len(paths))
    codings = ["gzip" if gzip_only or n % 4 < 2 else "identity" for n in range(len(paths))]
    async with httpx.AsyncClient(base_url=url, timeout=GUARD, limits=limits) as client:
        return await asyncio.gather(
            *(
                client.get(path, headers={"Accept-Encoding": coding})
                for path, coding in zip(paths, codings, strict=True)
            )
        )


def test_one_render_per_store_change_and_format(served: Served) -> None:
    served.write(news_rows(range(3)))
    paths = ["/feeds/news.rss", "/feeds/news.atom"] * 100
    responses = asyncio.run(burst(served.server.url, paths))
    assert [r.status_code for r in responses] == [200] * 200
    assert served.cache.renders == 2  # one RSS, one Atom
    for fmt in ("rss", "atom"):
        same = [r for r in responses if r.url.path.endswith(fmt)]
        assert len({r.content for r in same}) == 1 and len({r.headers["etag"] for r in same}) == 1
        assert {r.headers.get("content-encoding") for r in same} == {"gzip", None}
        assert same[0].headers["etag"] == etag_of(same[0].content)
    rss = next(r for r in responses if r.url.path.endswith("rss"))
    assert b"Item 2" in rss.content and b"Item 5" not in rss.content

    asyncio.run(burst(served.server.url, paths))  # nothing changed: nothing rendered
    assert served.cache.renders == 2

    served.write(news_rows(range(5, 6)))  # a change: one render per format again
    after = asyncio.run(burst(served.server.url, paths))
    assert served.cache.renders == 4
    assert all(b"Item 5" in r.content for r in after)
    assert all(
        r.headers["etag"] != rss.headers["etag"] for r in after if r.url.path.endswith("rss")
    )
    # a conditional request is answered from the cache too
    with httpx.Client(base_url=served.server.url, timeout=GUARD) as client:
        etag = after[0].headers["etag"]
        assert client.get(after[0].url.path, headers={"If-None-Match": etag}).status_code == 304
    assert served.cache.renders == 4


def test_healthz_answers_while_200_readers_wait_for_a_big_feed(served: Served) -> None:
    # "evil" keeps the default 50 items: 50 x 100 KB, a 5 MB document
    served.write(news_rows(range(60), size=100_000, stream="evil"))
    served.store.gate.clear()  # the render will wait in the store until the gate opens

    async def scenario() -> tuple[list[httpx.Response], httpx.Response]:
        paths = ["/feeds/evil.rss"] * 200
        readers = asyncio.ensure_future(burst(served.server.url, paths, gzip_only=True))
        while not served.store.reading.is_set():  # the render has started
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=served.server.url, timeout=GUARD) as client:
            health = await client.get("/healthz")
        assert not readers.done()  # every reader still waits for the render
        served.store.gate.set()
        return await readers, health

    responses, health = asyncio.run(scenario())
    assert health.status_code == 200 and health.json() == {"ok": True}
    assert served.store.reads == 1 and served.cache.renders == 1  # the others waited for it
    assert [r.status_code for r in responses] == [200] * 200
    assert len({r.content for r in responses}) == 1
    assert len(responses[0].content) > 5_000_000
    assert responses[0].content.count(b"<item>") == 50  # keep: the default 50


def test_a_failed_render_is_reported_to_every_waiter_and_retried() -> None:
    cache = RenderCache()
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def failing() -> bytes:
        calls.append(1)
        started.set()
        release.wait(GUARD)
        raise ValueError("broken item")

    errors: list[BaseException] = []

    def ask() -> None:
        try:
            cache.get("k", 1, failing, media_type="text/plain")
        except ValueError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    threads[0].start()
    started.wait(GUARD)
    for thread in threads[1:]:
        thread.start()
    release.set()
    for thread in threads:
        thread.join(GUARD)
    assert len(errors) == 5 and len(calls) == 1
    doc = cache.get("k", 1, lambda: b"fine " * 100, media_type="text/plain")
    assert doc.body == b"fine " * 100 and cache.renders == 2
    assert doc.gzipped is not None and gzip.decompress(doc.gzipped) == doc.body


def test_cache_keeps_the_newest_version_within_its_byte_budget() -> None:
    cache = RenderCache(max_bytes=3000)
    for key in ("a", "b", "c"):
        cache.get(key, 1, lambda: bytes(1000), media_type="text/plain")
    assert len(cache) == 2  # "a" (least recently used) went: each is 1000 + its gzip
    cache.get("b", 1, lambda: b"unused", media_type="text/plain")
    assert cache.renders == 3
    new = cache.get("b", 2, lambda: b"version 2", media_type="text/plain")
    assert new.body == b"version 2" and new.gzipped is None and cache.renders == 4
    cache.get("a", 1, lambda: bytes(1000), media_type="text/plain")
    assert cache.renders == 5
