"""The HTTP server, for real: uvicorn on 127.0.0.1 with an ephemeral port, httpx."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import feedparser
import httpx
import pytest
from lxml import etree
from publish_support import publish_config

from roses_app.config.model import (
    Config,
    HttpSettings,
    Publish,
    Settings,
)
from roses_app.publish import HttpServer, create_app
from roses_app.store import OutRow, Store

EVIL = "<script>alert(1)</script>"


class Clock:
    # well in the past, so that If-Modified-Since is honoured at once
    def __init__(self) -> None:
        self.t = float(int(time.time()) - 3600)

    def __call__(self) -> float:
        return self.t


def make_config(tmp_path: Path) -> Config:
    news = Publish("News", "All the news", keep_count=3)
    return publish_config(tmp_path, news, more={"evil": Publish(EVIL, EVIL), "hidden": None})


def item(n: int, title: str | None = None) -> str:
    return (
        f"<item><title>{title or f'Item {n}'}</title>"
        f"<link>https://example.org/{n}</link>"
        f"<description>&lt;p&gt;{'Long description. ' * 20}{n}&lt;/p&gt;</description>"
        f'<guid isPermaLink="false">guid-{n}</guid></item>'
    )


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.store = Store(tmp_path / "store.sqlite", clock=self.clock)
        self.health: dict[str, Any] = {"ok": True, "sources": 1}
        self.health_error: Exception | None = None
        self.batch = 0

        def health() -> dict[str, Any]:
            if self.health_error is not None:
                raise self.health_error
            return self.health

        app = create_app(make_config(tmp_path), self.store, health)
        self.server = HttpServer(app, "127.0.0.1", 0)
        self.server.start()
        self.client = httpx.Client(base_url=self.server.url, timeout=10)

    def write(self, rows: list[OutRow], batch: int | None = None) -> bool:
        if batch is None:
            batch = self.batch
            self.batch += 1
        self.clock.t += 10
        return self.store.write_batch("q", batch, rows)

    def get(self, path: str, **headers: str) -> httpx.Response:
        return self.client.get(path, headers=headers)

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.store.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def rows(stream: str, ns: range, part: str = "") -> list[OutRow]:
    return [OutRow(stream, part, 1_700_000_000_000_000 + n * 1_000_000, 0, item(n)) for n in ns]


def test_server_binds_ephemeral_port(env: Env) -> None:
    assert env.server.port > 0
    assert env.server.running
    assert env.server.url == f"http://127.0.0.1:{env.server.port}"


def test_rss_and_atom_served(env: Env) -> None:
    env.write(rows("news", range(2)))
    rss = env.get("/feeds/news.rss")
    assert rss.status_code == 200
    assert rss.headers["content-type"] == "application/rss+xml; charset=utf-8"
    root = etree.fromstring(rss.content)
    assert root.tag == "rss"
    parsed = feedparser.parse(rss.content)
    assert not parsed.bozo
    assert parsed.feed.title == "News"
    assert [e.title for e in parsed.entries] == ["Item 1", "Item 0"]
    assert [e.link for e in parsed.entries] == ["https://example.org/1", "https://example.org/0"]
    assert [e.id for e in parsed.entries] == ["guid-1", "guid-0"]
    self_link = root.find("channel/{http://www.w3.org/2005/Atom}link")
    assert self_link is not None
    assert self_link.get("href") == f"{env.server.url}/feeds/news.rss"

    atom = env.get("/feeds/news.atom")
    assert atom.status_code == 200
    assert atom.headers["content-type"] == "application/atom+xml; charset=utf-8"
    parsed = feedparser.parse(atom.content)
    assert not parsed.bozo and parsed.version == "atom10"
    assert [e.title for e in parsed.entries] == ["Item 1", "Item 0"]
    assert parsed.entries[0].link == "https://example.org/1"
    assert parsed.entries[0].id.startswith("urn:uuid:")

    head = env.client.head("/feeds/news.rss")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["etag"] == rss.headers["etag"]


def test_empty_published_feed_is_served(env: Env) -> None:
    resp = env.get("/feeds/news.rss")
    assert resp.status_code == 200
    assert feedparser.parse(resp.content).entries == []
    assert "last-modified" not in resp.headers


def test_etag_304(env: Env) -> None:
    env.write(rows("news", range(2)))
    first = env.get("/feeds/news.rss")
    etag = first.headers["etag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    again = env.get("/feeds/news.rss", **{"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    assert env.get("/feeds/news.rss", **{"If-None-Match": f'"x", W/{etag}'}).status_code == 304
    assert env.get("/feeds/news.rss", **{"If-None-Match": '"other"'}).status_code == 200
    # a new item changes the ETag
    env.write(rows("news", range(5, 6)))
    changed = env.get("/feeds/news.rss", **{"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    # Atom has its own ETag and 304 too
    atom = env.get("/feeds/news.atom")
    assert atom.headers["etag"] != changed.headers["etag"]
    assert env.get("/feeds/news.atom", **{"If-None-Match": atom.headers["etag"]}).status_code == 304


def test_if_modified_since_304(env: Env) -> None:
    env.write(rows("news", range(2)))
    first = env.get("/feeds/news.rss")
    last_modified = first.headers["last-modified"]
    assert last_modified == formatdate(int(env.clock.t), usegmt=True)
    again = env.get("/feeds/news.rss", **{"If-Modified-Since": last_modified})
    assert again.status_code == 304 and again.content == b""
    older = formatdate(env.clock.t - 60, usegmt=True)
    assert env.get("/feeds/news.rss", **{"If-Modified-Since": older}).status_code == 200
    assert env.get("/feeds/news.rss", **{"If-Modified-Since": "garbage"}).status_code == 200
    env.write(rows("news", range(7, 8)))
    assert env.get("/feeds/news.rss", **{"If-Modified-Since": last_modified}).status_code == 200


def test_gzip_negotiated(env: Env) -> None:
    env.write(rows("news", range(3)))
    with httpx.stream(
        "GET", f"{env.server.url}/feeds/news.rss", headers={"Accept-Encoding": "gzip"}
    ) as resp:
        raw = b"".join(resp.iter_raw())
        assert resp.headers["content-encoding"] == "gzip"
        assert "accept-encoding" in resp.headers.get("vary", "").lower()
    body = gzip.decompress(raw)
    assert feedparser.parse(body).feed.title == "News"
    plain = env.get("/feeds/news.rss", **{"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.content == body


def test_keep_limit(env: Env) -> None:
    env.write(rows("news", range(10)))
    parsed = feedparser.parse(env.get("/feeds/news.rss").content)
    assert [e.id for e in parsed.entries] == ["guid-9", "guid-8", "guid-7"]
    parsed = feedparser.parse(env.get("/feeds/news.atom").content)
    assert len(parsed.entries) == 3
    assert env.store.count("news", "") == 10  # everything is kept, the document shows 3


def test_guid_stability_and_replacement_in_place(env: Env) -> None:
    env.write(rows("news", range(2)))
    a = env.get("/feeds/news.rss")
    b = env.get("/feeds/news.rss")
    assert a.content == b.content and a.headers["etag"] == b.headers["etag"]
    atom_ids = [e.id for e in feedparser.parse(env.get("/feeds/news.atom").content).entries]

    newer = [OutRow("news", "", 1_700_000_100_000_000, 0, item(0, "Item 0, corrected"))]
    env.write(newer)
    parsed = feedparser.parse(env.get("/feeds/news.rss").content)
    assert [(e.id, e.title) for e in parsed.entries] == [
        ("guid-0", "Item 0, corrected"),
        ("guid-1", "Item 1"),
    ]
    atom = feedparser.parse(env.get("/feeds/news.atom").content)
    assert sorted(e.id for e in atom.entries) == sorted(atom_ids)


def test_replayed_batch_is_idempotent(env: Env) -> None:
    assert env.write(rows("news", range(2)), batch=42) is True
    before = env.get("/feeds/news.rss")
    assert env.write([OutRow("news", "", 1, 0, item(99))], batch=42) is False
    after = env.get("/feeds/news.rss")
    assert after.content == before.content
    assert after.headers["etag"] == before.headers["etag"]
    assert after.headers["last-modified"] == before.headers["last-modified"]


def test_split_parts_appear(env: Env) -> None:
    def opml_urls() -> list[str]:
        root = etree.fromstring(env.get("/feeds.opml").content)
        return [o.get("xmlUrl") or "" for o in root.iter("outline") if o.get("xmlUrl")]

    base = env.server.url
    assert f"{base}/feeds/topics/sport.rss" not in opml_urls()
    assert env.get("/feeds/topics/sport.rss").status_code == 404

    env.write(rows("topics", range(2), part="sport"))
    assert f"{base}/feeds/topics/sport.rss" in opml_urls()
    sport = env.get("/feeds/topics/sport.rss")
    assert sport.status_code == 200
    assert feedparser.parse(sport.content).feed.title == "Topics — sport"
    assert env.get("/feeds/topics/sport.atom").status_code == 200

    env.write(rows("topics", range(3, 4), part="a/b c"))
    urls = opml_urls()
    assert f"{base}/feeds/topics/a%2Fb%20c.rss" in urls
    quoted = env.get("/feeds/topics/a%2Fb%20c.rss")
    assert quoted.status_code == 200
    parsed = feedparser.parse(quoted.content)
    assert parsed.feed.title == "Topics — a/b c"
    assert [e.id for e in parsed.entries] == ["guid-3"]
    # double-quoted and unquoted-slash forms are accepted too
    assert env.get("/feeds/topics/a%252Fb%2520c.atom").status_code == 200
    assert env.get("/feeds/topics/a/b%20c.rss").status_code == 200
    # the index lists the parts
    index = env.get("/").text
    assert "/feeds/topics/a%2Fb%20c.atom" in index and "/feeds/topics/sport.rss" in index


def test_opml_served(env: Env) -> None:
    resp = env.get("/feeds.opml")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/x-opml")
    root = etree.fromstring(resp.content)
    assert root.get("version") == "2.0"
    texts = [o.get("text") for o in root.findall("body/outline")]
    assert texts == ["News", "evil"]  # no text in EVIL: the stream's name; no folder yet
    assert env.get("/feeds.opml", **{"If-None-Match": resp.headers["etag"]}).status_code == 304


def test_index_escapes(env: Env) -> None:
    resp = env.get("/")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/html; charset=utf-8"
    assert EVIL not in resp.text and "alert(1)" not in resp.text
    assert "<h2>evil</h2>" in resp.text
    assert "/feeds/news.rss" in resp.text and "/feeds.opml" in resp.text
    assert "hidden" not in resp.text


def test_unknown_feed_404(env: Env) -> None:
    for path in (
        "/feeds/nope.rss",
        "/feeds/hidden.rss",
        "/feeds/news.xml",
        "/feeds/topics.rss",
        "/feeds/news/x.rss",
        "/feeds/",
        "/nothing",
    ):
        resp = env.get(path)
        assert resp.status_code == 404, path
    text = env.get("/feeds/nope.rss").text
    # where to look, and nothing of the request (tests/test_publish_hygiene.py)
    assert text.startswith("Not found.") and "nope" not in text
    assert f"{env.server.url}/ " in text and f"{env.server.url}/feeds.opml" in text


def test_healthz(env: Env) -> None:
    resp = env.get("/healthz")
    assert resp.status_code == 200 and resp.json() == {"ok": True, "sources": 1}
    env.health = {"ok": False, "why": "spark down"}
    resp = env.get("/healthz")
    assert resp.status_code == 503 and resp.json()["why"] == "spark down"
    env.health_error = RuntimeError("boom")
    resp = env.get("/healthz")
    assert resp.status_code == 503 and "boom" in resp.json()["error"]


def test_stop_and_port_in_use(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite")
    app = create_app(make_config(tmp_path), store, lambda: {"ok": True})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = HttpServer(app, "127.0.0.1", busy.getsockname()[1])
        with pytest.raises(OSError, match="could not listen"):
            server.start()
    with HttpServer(app, "127.0.0.1", 0) as running:
        url = running.url
        assert httpx.get(f"{url}/healthz").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=2)
    store.close()


def test_stop_is_graceful() -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    def slow(request: object) -> PlainTextResponse:
        time.sleep(0.5)
        return PlainTextResponse("done")

    server = HttpServer(Starlette(routes=[Route("/slow", slow)]), "127.0.0.1", 0)
    server.start()
    results: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: results.append(httpx.get(f"{server.url}/slow")))
    thread.start()
    time.sleep(0.2)  # the request is in flight
    server.stop()
    thread.join(5)
    assert results and results[0].status_code == 200 and results[0].text == "done"
    assert not server.running


def test_links_never_come_from_the_host_header(env: Env) -> None:
    """With base_url unset, links use the configured host and the bound port, whatever
    the request's Host says."""
    env.write(rows("news", range(2)))
    env.write(rows("topics", range(1), part="sport"))
    base = env.server.url  # http://127.0.0.1:PORT
    evil = {"Host": "evil.example", "X-Forwarded-Host": "evil.example"}
    for path in ("/", "/feeds.opml", "/feeds/news.rss", "/feeds/news.atom", "/nope"):
        honest = env.get(path)
        forged = env.get(path, **evil)
        assert b"evil.example" not in forged.content, path
        assert forged.content == honest.content, path
        assert forged.headers.get("etag") == honest.headers.get("etag"), path
    rss = etree.fromstring(env.get("/feeds/news.rss", **evil).content)
    self_link = rss.find("channel/{http://www.w3.org/2005/Atom}link")
    assert self_link is not None and self_link.get("href") == f"{base}/feeds/news.rss"
    assert rss.findtext("channel/link") == f"{base}/feeds/news.html"
    opml = etree.fromstring(env.get("/feeds.opml", **evil).content)
    urls = [o.get("xmlUrl") for o in opml.iter("outline") if o.get("xmlUrl")]
    assert urls == [f"{base}/feeds/{n}.rss" for n in ("news", "topics/sport", "evil")]
    assert f'href="{base}/feeds/news.atom"' in env.get("/", **evil).text


def test_base_url_is_used_when_set(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    config = Config(
        path=config.path,
        settings=Settings(
            data_dir=tmp_path, http=HttpSettings("127.0.0.1", 0, "https://feeds.example.org/r/")
        ),
        sources=config.sources,
        streams=config.streams,
    )
    store = Store(tmp_path / "s.sqlite")
    try:
        with HttpServer(create_app(config, store, lambda: {"ok": True}), "127.0.0.1", 0) as srv:
            opml = httpx.get(f"{srv.url}/feeds.opml", headers={"Host": "evil.example"}).content
        urls = [o.get("xmlUrl") for o in etree.fromstring(opml).iter("outline")]
        assert "https://feeds.example.org/r/feeds/news.rss" in urls
    finally:
        store.close()


@pytest.mark.parametrize(
    ("host", "local", "expected"),
    [
        ("127.0.0.1", ("127.0.0.1", 8123), "http://127.0.0.1:8123"),
        ("localhost", ("127.0.0.1", 8123), "http://localhost:8123"),
        ("0.0.0.0", ("192.0.2.7", 8080), "http://192.0.2.7:8080"),  # where it came in
        ("::", ("2001:db8::1", 8080), "http://[2001:db8::1]:8080"),
        ("::1", ("::1", 8080), "http://[::1]:8080"),
    ],
)
def test_server_base(tmp_path: Path, host: str, local: tuple[str, int], expected: str) -> None:
    from starlette.requests import Request

    from roses_app.publish.server import server_base

    config = Config(
        path=tmp_path / "feeds.yaml",
        settings=Settings(data_dir=tmp_path, http=HttpSettings(host, 0)),
        sources={},
        streams={},
    )
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"host", b"evil.example")],
        "server": local,
    }
    assert server_base(config, Request(scope)) == expected


def test_gzip_refused_with_q_zero(env: Env) -> None:
    env.write(rows("news", range(3)))
    for refusal in ("gzip;q=0", "identity", "br", "gzip;q=0, identity"):
        with httpx.stream(
            "GET", f"{env.server.url}/feeds/news.rss", headers={"Accept-Encoding": refusal}
        ) as resp:
            raw = b"".join(resp.iter_raw())
        assert "content-encoding" not in resp.headers, refusal
        assert feedparser.parse(raw).feed.title == "News", refusal
    for accepted in ("gzip", "deflate, gzip;q=0.5", "*", "GZIP"):
        resp = env.get("/feeds/news.rss", **{"Accept-Encoding": accepted})
        assert resp.headers.get("content-encoding") == "gzip", accepted
