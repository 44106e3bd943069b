"""JSON Feed 1.1: the same items and ids as RSS and Atom, valid, cached, through the real server.

The items (tests/data/jsonfeed/items.xml) are written to a real store and read back from
uvicorn on 127.0.0.1 with httpx.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from lxml import etree
from publish_support import publish_config

from roses_app.config.model import Config, Publish
from roses_app.items import iso8601, serialize
from roses_app.publish import HttpServer, create_app
from roses_app.publish.export import export_static
from roses_app.publish.render import ATOM_NS, entry_id
from roses_app.store import OutRow, Store

DATA = Path(__file__).parent / "data" / "jsonfeed" / "items.xml"
T0 = 1_800_000_000_000_000
VERSION = "https://jsonfeed.org/version/1.1"
# https://www.jsonfeed.org/version/1.1/ : the keys a document and an item may have
TOP_KEYS = {
    "version",
    "title",
    "home_page_url",
    "feed_url",
    "description",
    "user_comment",
    "next_url",
    "icon",
    "favicon",
    "authors",
    "language",
    "expired",
    "hubs",
    "items",
}
ITEM_KEYS = {
    "id",
    "url",
    "external_url",
    "title",
    "content_html",
    "content_text",
    "summary",
    "image",
    "banner_image",
    "date_published",
    "date_modified",
    "authors",
    "tags",
    "language",
    "attachments",
}


def make_config(tmp_path: Path) -> Config:
    news = Publish("News <b>today</b>", "All the news")
    return publish_config(tmp_path, news, split_by="string(category[1])")


def data_rows() -> list[OutRow]:
    """The items of the data file, newest first: the first has the latest time."""
    items = etree.parse(str(DATA)).getroot().findall("item")
    out = []
    for n, el in enumerate(items):
        ts = T0 - n * 60_000_000
        out.append(OutRow("news", "", ts, 0, serialize(el)))
        category = el.findtext("category")
        if category:
            out.append(OutRow("topics", category, ts, 0, serialize(el)))
    return out


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.config = make_config(tmp_path)
        self.store = Store(tmp_path / "store.sqlite")
        self.store.write_batch("q", 0, data_rows())
        self.app = create_app(self.config, self.store, lambda: {"ok": True})
        self.server = HttpServer(self.app, "127.0.0.1", 0)
        self.server.start()
        self.client = httpx.Client(base_url=self.server.url, timeout=10)

    def close(self) -> None:
        self.client.close()
        self.server.stop()
        self.store.close()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def check_rfc3339(value: Any) -> None:
    assert isinstance(value, str)
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None, value


def check_url(value: Any) -> None:
    assert isinstance(value, str)
    assert urlsplit(value).scheme in ("http", "https", "mailto"), value


def check_json_feed(doc: dict[str, Any]) -> None:
    """The required fields and the types of JSON Feed 1.1, and no key it does not define."""
    assert doc["version"] == VERSION
    assert isinstance(doc["title"], str) and doc["title"]
    assert set(doc) <= TOP_KEYS, set(doc) - TOP_KEYS
    for key in ("home_page_url", "feed_url"):
        if key in doc:
            check_url(doc[key])
    for hub in doc.get("hubs", []):
        assert set(hub) == {"type", "url"} and isinstance(hub["type"], str)
        check_url(hub["url"])
    assert isinstance(doc["items"], list)
    for item in doc["items"]:
        assert set(item) <= ITEM_KEYS, set(item) - ITEM_KEYS
        assert isinstance(item["id"], str) and item["id"]
        assert isinstance(item.get("content_html", item.get("content_text")), str)
        for key in ("url", "image"):
            if key in item:
                check_url(item[key])
        for key in ("date_published", "date_modified"):
            if key in item:
                check_rfc3339(item[key])
        for author in item.get("authors", []):
            assert set(author) <= {"name", "url", "avatar"} and author
        assert all(isinstance(t, str) for t in item.get("tags", []))
        for attachment in item.get("attachments", []):
            check_url(attachment["url"])
            assert isinstance(attachment["mime_type"], str) and "/" in attachment["mime_type"]
            assert isinstance(attachment.get("size_in_bytes", 0), int)


def test_the_same_items_and_ids_in_rss_atom_and_json(env: Env) -> None:
    rss = etree.fromstring(env.client.get("/feeds/news.rss").content)
    atom = etree.fromstring(env.client.get("/feeds/news.atom").content)
    response = env.client.get("/feeds/news.json")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/feed+json; charset=utf-8"
    doc = response.json()
    check_json_feed(doc)

    ids = [item["id"] for item in doc["items"]]
    assert len(ids) == 4 and len(set(ids)) == 4
    assert ids == [g.text for g in rss.iterfind("channel/item/guid")]
    assert [e.text for e in atom.iterfind(f"{{{ATOM_NS}}}entry/{{{ATOM_NS}}}id")] == [
        entry_id(i) for i in ids
    ]
    assert ids[:2] == ["https://example.org/full", "https://example.org/permalink"]
    assert ids[3] == "opaque-7"
    rss_titles = [t.text for t in rss.iterfind("channel/item/title")]
    assert [i["title"] for i in doc["items"] if "title" in i] == rss_titles


def test_json_items_are_plain_text_titles_and_sanitized_html(env: Env) -> None:
    doc = env.client.get("/feeds/news.json").json()
    assert doc["title"] == "News today"
    assert doc["feed_url"] == f"{env.server.url}/feeds/news.json"
    assert doc["home_page_url"] == f"{env.server.url}/feeds/news.html"
    # the hub ROSES advertises in RSS and Atom, in JSON Feed's words
    assert doc["hubs"][0]["type"] == "WebSub"
    assert doc["hubs"][0]["url"].startswith(f"{env.server.url}/")
    full, named, untitled, bare = doc["items"]

    # a stored title is text: markup-like text in it is kept, as in RSS and Atom
    assert full["title"] == "Full <b>item</b> — déjà vu"
    assert full["url"] == "https://example.org/full"
    assert (
        full["content_html"]
        == '<p>Body <a href="https://example.org/more" rel="noopener noreferrer">more</a></p>'
    )
    assert full["summary"] == "The summary."
    assert full["authors"] == [{"name": "Mara Quill", "url": "mailto:mara@example.org"}]
    assert full["tags"] == ["Climate", "Science"]
    assert full["attachments"] == [
        {"url": "https://example.org/a.mp3", "mime_type": "audio/mpeg", "size_in_bytes": 12345}
    ]
    assert full["date_published"] == "2026-11-21T10:00:00Z"

    assert named["url"] == "https://example.org/permalink"  # the permalink guid
    assert named["authors"] == [{"name": "Mara Quill"}]
    assert named["date_published"] == "2026-11-20T08:30:00Z"
    assert "onerror" not in named["content_html"] and "Text" in named["content_html"]

    assert "title" not in untitled
    # undated: no publication date; modified when ROSES received it (as Atom's updated)
    assert "date_published" not in untitled
    assert untitled["date_modified"] == iso8601(T0 - 2 * 60_000_000)
    assert untitled["attachments"] == [
        {"url": "https://example.org/file.bin", "mime_type": "application/octet-stream"}
    ]
    assert bare["content_text"] == "" and "url" not in bare
    assert "attachments" not in bare  # its javascript: enclosure is dropped
    text = json.dumps(doc)
    assert "<script" not in text and "pwned" not in text


def test_split_parts_have_json_feeds(env: Env) -> None:
    doc = env.client.get("/feeds/topics/Climate.json").json()
    check_json_feed(doc)
    assert [i["id"] for i in doc["items"]] == ["https://example.org/full"]
    assert doc["feed_url"] == f"{env.server.url}/feeds/topics/Climate.json"
    assert env.client.get("/feeds/topics/Nothing.json").status_code == 404


def test_json_feed_etag_304_and_gzip_through_the_render_cache(env: Env) -> None:
    cache = env.app.state.render_cache
    before = cache.renders
    with env.client.stream("GET", "/feeds/news.json", headers={"Accept-Encoding": "gzip"}) as r:
        assert r.status_code == 200
        assert r.headers["content-encoding"] == "gzip"
        raw = b"".join(r.iter_raw())
    body = gzip.decompress(raw)
    assert json.loads(body)["version"] == VERSION
    etag = r.headers["etag"]

    plain = env.client.get("/feeds/news.json", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.content == body and plain.headers["etag"] == etag
    again = env.client.get("/feeds/news.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert cache.renders == before + 1  # three answers, one render

    newer = (
        '<item><title>Newest</title><guid isPermaLink="false">n-1</guid>'
        "<description>New</description></item>"
    )
    env.store.write_batch("q", 1, [OutRow("news", "", T0 + 1_000_000, 0, newer)])
    changed = env.client.get("/feeds/news.json", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert changed.json()["items"][0]["id"] == "n-1"


def test_index_opml_and_export_list_json_feeds(env: Env, tmp_path: Path) -> None:
    base = env.server.url
    index = env.client.get("/").text
    assert f'href="{base}/feeds/news.json" type="application/feed+json"' in index
    assert f'href="{base}/feeds/topics/Climate.json"' in index
    assert 'href="/feeds-json.opml"' in index

    def xml_urls(path: str) -> list[str]:
        response = env.client.get(path)
        assert response.status_code == 200
        return [str(u) for u in etree.fromstring(response.content).xpath("//outline/@xmlUrl")]

    # each feed once per list: a reader importing one subscribes once
    assert xml_urls("/feeds-json.opml") == [
        f"{base}/feeds/news.json",
        f"{base}/feeds/topics/Climate.json",
    ]
    assert xml_urls("/feeds.opml") == [f"{base}/feeds/news.rss", f"{base}/feeds/topics/Climate.rss"]

    out = tmp_path / "public"
    written = export_static(env.config, env.store, out).files
    assert out / "feeds" / "news.json" in written
    exported = json.loads((out / "feeds" / "news.json").read_text("utf-8"))
    check_json_feed(exported)
    served = env.client.get("/feeds/news.json").json()
    assert [i["id"] for i in exported["items"]] == [i["id"] for i in served["items"]]
    assert (out / "feeds" / "topics" / "Climate.json").is_file()
    assert (out / "feeds" / "news.html").is_file()
    assert b"/feeds/news.json" in (out / "feeds-json.opml").read_bytes()
