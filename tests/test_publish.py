"""Feed documents and the catalog, without HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import feedparser
import pytest
from lxml import etree
from publish_support import publish_config

from roses_app.config.model import (
    Config,
    Publish,
)
from roses_app.publish import (
    Catalog,
    FeedInfo,
    FeedStats,
    feed_path,
    render_atom,
    render_index,
    render_opml,
    render_rss,
)
from roses_app.publish.render import ATOM_NS, entry_id
from roses_app.store import OutRow, Store

ATOM = f"{{{ATOM_NS}}}"
T0 = 1_700_000_000_000_000  # µs


def make_config(tmp_path: Path, base_url: str | None = None) -> Config:
    news = Publish("News <b>&", "All the news", keep_count=3)
    return publish_config(tmp_path, news, more={"hidden": None}, port=8080, base_url=base_url)


def rich_item(n: int, *, title: str | None = None, pubdate: bool = True) -> str:
    pub = "<pubDate>Tue, 14 Nov 2023 22:13:20 GMT</pubDate>" if pubdate else ""
    return (
        '<item xmlns:content="http://purl.org/rss/1.0/modules/content/"'
        ' xmlns:dc="http://purl.org/dc/elements/1.1/">'
        f"<title>{title or f'Title {n}'}</title>"
        f"<link>https://example.org/a/{n}</link>"
        f"<description>&lt;p&gt;Summary {n} &amp;amp; more&lt;/p&gt;</description>"
        f"<content:encoded>&lt;p&gt;Body {n}&lt;/p&gt;</content:encoded>"
        f"{pub}"
        f'<guid isPermaLink="false">urn:test:{n}</guid>'
        "<author>jo@example.org (Jo Writer)</author>"
        '<category domain="http://example.org/tax">volcano</category>'
        '<enclosure url="https://example.org/a.mp3" type="audio/mpeg" length="123"/>'
        "<dc:subject>kept</dc:subject>"
        "</item>"
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "store.sqlite", clock=lambda: 1_700_000_100.0)
    yield s
    s.close()


def info(name: str = "news", part: str = "", keep: int = 50) -> FeedInfo:
    return FeedInfo(
        name=name if not part else f"{name}/{part}",
        stream=name,
        part=part,
        title="News",
        description="All the news",
        keep=keep,
        rss_url=f"http://h{feed_path(name, part or None, 'rss')}",
        atom_url=f"http://h{feed_path(name, part or None, 'atom')}",
        html_url="http://h/#feed-news",
    )


def test_rss_structure(store: Store) -> None:
    store.write_batch(
        "q",
        0,
        [
            OutRow("news", "", T0, 0, rich_item(1)),
            OutRow("news", "", T0 + 1, 0, rich_item(2, pubdate=False)),
            OutRow("news", "", T0 + 2, 0, "<item><title>no guid</title></item>"),
        ],
    )
    entries = store.latest("news", "", 10)
    body = render_rss(info(), entries, updated=store.feed_updated("news", ""))
    assert body.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    root = etree.fromstring(body)
    assert root.tag == "rss" and root.get("version") == "2.0"
    channel = root.find("channel")
    assert channel is not None
    assert channel.findtext("title") == "News"
    assert channel.findtext("link") == "http://h/#feed-news"
    assert channel.findtext("description") == "All the news"
    assert channel.findtext("lastBuildDate") == "Tue, 14 Nov 2023 22:15:00 GMT"
    self_link = channel.find(f"{ATOM}link")
    assert self_link is not None
    assert self_link.get("rel") == "self" and self_link.get("href") == "http://h/feeds/news.rss"
    items = channel.findall("item")
    assert [i.findtext("title") for i in items] == ["no guid", "Title 2", "Title 1"]
    # elements are kept, including extension elements
    assert items[2].findtext("{http://purl.org/dc/elements/1.1/}subject") == "kept"
    assert items[2].findtext("pubDate") == "Tue, 14 Nov 2023 22:13:20 GMT"
    # no pubDate is invented: the time it was received is its atom:updated only;
    # a missing guid comes from the store identity
    assert items[1].find("pubDate") is None
    assert items[1].findtext(f"{ATOM}updated") == "2023-11-14T22:13:20.000001Z"
    guid = items[0].find("guid")
    assert guid is not None and guid.get("isPermaLink") == "false"
    assert guid.text == entries[0].guid and len(guid.text or "") == 64
    # namespaces are declared once, at the top
    assert body.count(b'xmlns:dc="http://purl.org/dc/elements/1.1/"') == 1
    # rendering is deterministic (the ETag relies on it)
    assert render_rss(info(), entries, updated=store.feed_updated("news", "")) == body

    parsed = feedparser.parse(body)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "rss20"
    assert parsed.feed.title == "News"
    assert [e.title for e in parsed.entries] == ["no guid", "Title 2", "Title 1"]
    assert parsed.entries[2].link == "https://example.org/a/1"
    assert parsed.entries[2].id == "urn:test:1"
    assert parsed.entries[2].enclosures[0].href == "https://example.org/a.mp3"


def test_atom_structure(store: Store) -> None:
    store.write_batch(
        "q",
        0,
        [
            OutRow("news", "", T0, 0, rich_item(1)),
            OutRow("news", "", T0 + 5_000_000, 0, rich_item(2, pubdate=False)),
        ],
    )
    entries = store.latest("news", "", 10)
    body = render_atom(info(), entries, updated=store.feed_updated("news", ""))
    root = etree.fromstring(body)
    assert root.tag == f"{ATOM}feed"
    assert (root.findtext(f"{ATOM}id") or "").startswith("urn:uuid:")
    assert root.findtext(f"{ATOM}title") == "News"
    assert root.findtext(f"{ATOM}updated") == "2023-11-14T22:15:00Z"
    rels = {link.get("rel"): link.get("href") for link in root.findall(f"{ATOM}link")}
    assert rels == {"self": "http://h/feeds/news.atom", "alternate": "http://h/#feed-news"}
    assert root.find(f"{ATOM}author/{ATOM}name") is not None
    e2, e1 = root.findall(f"{ATOM}entry")
    assert e1.findtext(f"{ATOM}id") == entry_id("urn:test:1")
    assert e1.findtext(f"{ATOM}updated") == "2023-11-14T22:13:20Z"
    assert e1.findtext(f"{ATOM}published") == "2023-11-14T22:13:20Z"
    assert e2.findtext(f"{ATOM}updated") == "2023-11-14T22:13:25Z"  # from ts
    summary = e1.find(f"{ATOM}summary")
    assert summary is not None and summary.get("type") == "html"
    assert summary.text == "<p>Summary 1 &amp; more</p>"
    content = e1.find(f"{ATOM}content")
    assert content is not None and content.text == "<p>Body 1</p>"
    assert e1.findtext(f"{ATOM}author/{ATOM}name") == "Jo Writer"
    assert e1.findtext(f"{ATOM}author/{ATOM}email") == "jo@example.org"
    cat = e1.find(f"{ATOM}category")
    assert cat is not None and cat.get("term") == "volcano"
    assert cat.get("scheme") == "http://example.org/tax"
    links = {link.get("rel"): link.get("href") for link in e1.findall(f"{ATOM}link")}
    assert links == {
        "alternate": "https://example.org/a/1",
        "enclosure": "https://example.org/a.mp3",
    }
    assert render_atom(info(), entries, updated=store.feed_updated("news", "")) == body

    parsed = feedparser.parse(body)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert parsed.version == "atom10"
    assert parsed.feed.title == "News"
    assert [e.title for e in parsed.entries] == ["Title 2", "Title 1"]
    assert parsed.entries[1].link == "https://example.org/a/1"
    assert parsed.entries[1].id == entry_id("urn:test:1")
    assert parsed.entries[1].summary == "<p>Summary 1 &amp; more</p>"
    assert parsed.entries[1].author_detail.name == "Jo Writer"
    assert parsed.entries[1].tags[0].term == "volcano"


def test_empty_feeds_are_valid() -> None:
    rss = feedparser.parse(render_rss(info(), []))
    atom = feedparser.parse(render_atom(info(), []))
    assert not rss.bozo and not atom.bozo
    assert rss.entries == [] and atom.entries == []
    before = time.time()
    root = etree.fromstring(render_atom(info(), []))
    # an empty feed was last changed when its document was made, not in 1970
    updated = datetime.fromisoformat((root.findtext(f"{ATOM}updated") or "").replace("Z", "+00:00"))
    assert before - 1 <= updated.timestamp() <= time.time()


def test_atom_id_stable_across_replacement(store: Store) -> None:
    store.write_batch("q", 0, [OutRow("news", "", T0, 0, rich_item(1, title="v1"))])
    before = feedparser.parse(render_atom(info(), store.latest("news", "", 10)))
    store.write_batch("q", 1, [OutRow("news", "", T0 + 1, 0, rich_item(1, title="v2"))])
    after = feedparser.parse(render_atom(info(), store.latest("news", "", 10)))
    assert len(after.entries) == 1
    assert after.entries[0].id == before.entries[0].id
    assert after.entries[0].title == "v2"


def test_item_without_pubdate_or_guid_gets_stable_ones(store: Store) -> None:
    bare = "<item><title>Bare</title><description>x</description></item>"
    store.write_batch("q", 0, [OutRow("news", "", T0, 0, bare)])
    docs = [render_rss(info(), store.latest("news", "", 10)) for _ in range(2)]
    assert docs[0] == docs[1]
    parsed = feedparser.parse(docs[0])
    assert parsed.entries[0].id == store.latest("news", "", 1)[0].guid
    assert "published" not in parsed.entries[0]  # not the time it was received
    assert parsed.entries[0].updated == "2023-11-14T22:13:20Z"


def test_non_item_root_is_wrapped(store: Store) -> None:
    store.write_batch("q", 0, [OutRow("news", "", T0, 0, "<title>Only a title</title>")])
    parsed = feedparser.parse(render_rss(info(), store.latest("news", "", 10)))
    assert parsed.entries[0].title == "Only a title"


def test_catalog_and_split_parts(tmp_path: Path, store: Store) -> None:
    cat = Catalog(make_config(tmp_path), store)
    assert [f.name for f in cat.feeds()] == ["news"] and cat.count() == 1
    groups = cat.groups()
    assert [(g.stream, g.split, len(g.feeds)) for g in groups] == [
        ("news", False, 1),
        ("topics", True, 0),
    ]
    news = cat.lookup("news")
    assert news is not None
    assert news.rss_url == "http://127.0.0.1:8080/feeds/news.rss"
    assert news.atom_url == "http://127.0.0.1:8080/feeds/news.atom"
    assert news.keep == 3 and news.title == "News &"  # plain text
    assert cat.lookup("hidden") is None and cat.lookup("nope") is None
    assert cat.lookup("topics") is None and cat.lookup("news", "x") is None

    store.write_batch(
        "q",
        0,
        [
            OutRow("topics", "sport", 1, 0, rich_item(1)),
            OutRow("topics", "a/b c", 2, 0, rich_item(2)),
        ],
    )
    names = [f.name for f in cat.feeds()]
    assert names == ["news", "topics/a/b c", "topics/sport"] and cat.count() == 3
    part = cat.lookup("topics", "a/b c")
    assert part is not None
    assert part.rss_url == "http://127.0.0.1:8080/feeds/topics/a%2Fb%20c.rss"
    assert part.title == "Topics — a/b c" and part.part == "a/b c" and part.keep == 50
    assert cat.lookup("topics", "a%2Fb%20c") == part  # the quoted form is accepted too
    assert cat.lookup("topics", "missing") is None
    configured = Catalog(make_config(tmp_path, "https://feeds.example/x/"), store)
    fixed = configured.lookup("news", server_base="http://ignored")
    assert fixed is not None and fixed.rss_url == "https://feeds.example/x/feeds/news.rss"
    assert cat.lookup("news", server_base="http://10.0.0.1:9")
    assert cat.base("http://10.0.0.1:9/") == "http://10.0.0.1:9"


def test_opml_lists_every_feed_and_part(tmp_path: Path, store: Store) -> None:
    cat = Catalog(make_config(tmp_path), store)
    store.write_batch("q", 0, [OutRow("topics", "sport", 1, 0, rich_item(1))])
    body = render_opml(cat.groups())
    root = etree.fromstring(body)
    assert root.tag == "opml" and root.get("version") == "2.0"
    assert root.findtext("head/title")
    top = root.findall("body/outline")
    assert [o.get("text") for o in top] == ["News &", "Topics"]
    assert top[0].get("xmlUrl") == "http://127.0.0.1:8080/feeds/news.rss"
    assert top[1].get("xmlUrl") is None
    [sport] = top[1].findall("outline")
    assert sport.get("xmlUrl") == "http://127.0.0.1:8080/feeds/topics/sport.rss"
    assert sport.get("type") == "rss" and sport.get("text") == "Topics — sport"
    # flat FeedInfos work too
    flat = etree.fromstring(render_opml(cat.feeds()))
    urls = [o.get("xmlUrl") for o in flat.iter("outline") if o.get("xmlUrl")]
    assert urls == [
        "http://127.0.0.1:8080/feeds/news.rss",
        "http://127.0.0.1:8080/feeds/topics/sport.rss",
    ]


def test_index_escapes_everything() -> None:
    evil = FeedInfo(
        name="x",
        stream="x",
        part="",
        title="<script>alert(1)</script>",
        description='"><img src=x onerror=alert(1)>',
        keep=5,
        rss_url='http://h/feeds/x.rss?"<',
        atom_url="http://h/feeds/x.atom",
        html_url="http://h/#feed-x",
    )
    body = render_index([evil], {"x": FeedStats(3, 0.0)}).decode()
    assert "<script>" not in body and "alert(1)" not in body  # markup is not text
    assert "<img" not in body and "&lt;img" not in body
    assert "<h2>x</h2>" in body  # a title with no text left: the stream's name
    assert 'href="http://h/feeds/x.rss?&quot;&lt;"' in body
    assert "3 items, updated 1970-01-01 00:00:00 UTC" in body
    assert "No stream is published yet" in render_index([]).decode()
