"""Titles, author names, category labels and source names are plain text in every output.

Many feed readers render an RSS ``<title>`` as HTML, so a source's
``<title>&lt;img src=x onerror=alert(1)&gt;</title>`` or a mail's ``Subject: <script>``
must not reach them as markup.  ``tests/data/publish/plain_text.yaml`` holds hostile and
ordinary values next to the text published for them, rendered by the real RSS and Atom
renderers; a hostile RSS file and a hostile mail go through the real connectors, the
store and the HTTP server, and are read back as RSS, Atom, OPML and the index.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import feedparser
import nh3
import pytest
import yaml
from lxml import etree
from lxml import html as lxml_html
from test_publish_server import Env

from roses_app.connectors.mail.xmlize import xmlize_message
from roses_app.connectors.xmlize import parse_feed
from roses_app.items import FEED_NAMESPACES
from roses_app.publish import FeedInfo, render_atom, render_index, render_opml, render_rss
from roses_app.publish.entries import KEPT_CHARS
from roses_app.publish.render import ATOM_NS
from roses_app.store import OutRow, StoredEntry

DATA = Path(__file__).parent / "data" / "publish"
CASES: list[dict[str, Any]] = yaml.safe_load((DATA / "plain_text.yaml").read_text("utf-8"))
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load(
    (DATA / "hostile.expected.yaml").read_text("utf-8")
)
A = f"{{{ATOM_NS}}}"
DC = FEED_NAMESPACES["dc"]
LINK = "https://ok.example/item"
# What must never come out: markup, event handlers, the scripts' code itself.
DANGER = re.compile(
    rb"<\s*(script|img|svg|iframe)|&lt;\s*(script|img|svg)|(?<![a-z-])on[a-z]+=|alert\("
)

FEED = FeedInfo(
    name="t",
    stream="t",
    part="",
    title="T",
    description="",
    keep=50,
    rss_url="http://h/feeds/t.rss",
    atom_url="http://h/feeds/t.atom",
    html_url="http://h/#feed-t",
)


def case_id(case: dict[str, Any]) -> str:
    return f"{case['field']}:{case['xml'][:40]}"


def case_item(case: dict[str, Any]) -> str:
    tag = case["field"]
    title = "" if tag == "title" else "<title>T</title>"
    url = ' url="https://ok.example/feed.rss"' if tag == "source" else ""  # RSS requires it
    return (
        f'<item xmlns:dc="{DC}">{title}<{tag}{url}>{case["xml"]}</{tag}>'
        f"<link>{LINK}</link><guid>g</guid></item>"
    )


def entry(item: str, n: int = 1) -> StoredEntry:
    return StoredEntry("t", "", f"g{n}", 1_700_000_000_000_000 + n, n, item, 0.0, 0.0)


def html_elements(text: str) -> list[str]:
    """The elements a reader that renders the text as HTML would build from it."""
    root = lxml_html.fragment_fromstring(f"<p>{text}</p>", create_parent="div")
    return [str(el.tag) for el in root.iter() if el.tag not in ("div", "p")]


def inert_elements(text: str) -> bool:
    """True when every element a reader rendering ``text`` as HTML builds is one the
    sanitizer keeps, with no attribute: shown as HTML, it does nothing."""
    root = lxml_html.fragment_fromstring(f"<span>{text}</span>", create_parent="div")
    found = [el for el in root.iter() if el.tag not in ("div", "span")]
    return bool(found) and all(el.tag in nh3.ALLOWED_TAGS and not el.attrib for el in found)


def test_the_data_covers_every_field() -> None:
    fields = {case["field"] for case in CASES}
    assert fields == {"title", "author", "dc:creator", "category", "source", "dc:rights"}
    assert any(case.get("markup") for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rss_publishes_plain_text(case: dict[str, Any]) -> None:
    body = render_rss(FEED, [entry(case_item(case))])
    assert not DANGER.search(body), body
    item = etree.fromstring(body).find("channel/item")
    assert item is not None
    tag = case["field"].replace("dc:", f"{{{DC}}}")
    if tag == "author" and "@" not in (case["text"] or "@"):
        tag = f"{{{DC}}}creator"  # RSS <author> is an address: a name alone is dc:creator
    element = item.find(tag)
    if case["text"] is None:
        assert element is None
        return
    assert element is not None and len(element) == 0
    assert (element.text or "") == case["text"]
    if case.get("markup"):  # text that looks like markup, harmless shown as HTML
        assert inert_elements(element.text or "")
    else:
        assert html_elements(element.text or "") == []
    if case["field"] == "title":  # a reader that trusts us, with no sanitizer of its own
        parsed = feedparser.parse(body, sanitize_html=False)
        assert parsed.entries[0].get("title", "") == case["text"]


def _atom_text(entry_el: etree._Element, field: str) -> str | None:
    if field == "title":
        return entry_el.findtext(f"{A}title")
    if field in ("author", "dc:creator"):
        author = entry_el.find(f"{A}author")
        if author is None:
            return None
        email = author.findtext(f"{A}email")
        name = author.findtext(f"{A}name") or ""
        return f"{name} <{email}>" if email else name
    if field == "category":
        terms = [c.get("term") for c in entry_el.findall(f"{A}category")]
        return terms[0] if terms else None
    return None  # Atom entries have no source name


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_atom_publishes_plain_text(case: dict[str, Any]) -> None:
    body = render_atom(FEED, [entry(case_item(case))])
    assert not DANGER.search(body), body
    entry_el = etree.fromstring(body).find(f"{A}entry")
    assert entry_el is not None
    assert entry_el.find(f"{A}title").get("type") == "text"
    expected = case.get("atom", case["text"])
    if case["field"] != "source":
        assert _atom_text(entry_el, case["field"]) == expected


def test_feed_titles_are_plain_text_in_every_format() -> None:
    feed = FeedInfo(
        name="w",
        stream="w",
        part="",
        title="<img src=x onerror=alert(1)>Weather &amp; <b>sea</b>",
        description="<script>alert(2)</script>Forecasts",
        keep=5,
        rss_url="http://h/feeds/w.rss",
        atom_url="http://h/feeds/w.atom",
        html_url="http://h/#feed-w",
    )
    rss, atom = render_rss(feed, []), render_atom(feed, [])
    opml, index = render_opml([feed]), render_index([feed])
    for body in (rss, atom, opml, index):
        assert not DANGER.search(body), body
    channel = etree.fromstring(rss).find("channel")
    assert channel is not None
    assert channel.findtext("title") == "Weather & sea"
    assert channel.findtext("description") == "Forecasts"
    root = etree.fromstring(atom)
    assert root.findtext(f"{A}title") == "Weather & sea"
    assert root.findtext(f"{A}subtitle") == "Forecasts"
    outline = etree.fromstring(opml).find("body/outline")
    assert outline is not None
    assert (outline.get("text"), outline.get("description")) == ("Weather & sea", "Forecasts")
    assert "<h2>Weather &amp; sea</h2>" in index.decode() and "<p>Forecasts</p>" in index.decode()


def _items_from_connectors() -> dict[str, str]:
    # the source's URL is the feed's (RSS requires one): as if fetched from the web
    feed = parse_feed((DATA / "hostile_titles.xml").read_bytes(), "https://hostile.example/feed")
    mail, _ = xmlize_message((DATA / "hostile_subject.eml").read_bytes())
    [(item, _)] = feed.entries
    return {"hostile_titles.xml": item, "hostile_subject.eml": mail}


HOSTILE_PART = "<script>alert(5)</script>Weather"


def test_hostile_sources_are_served_as_plain_text(tmp_path: Path) -> None:
    env = Env(tmp_path)
    try:
        items = _items_from_connectors()
        rows = [
            OutRow("news", "", 1_700_000_000_000_000 + n, 0, items[name])
            for n, name in enumerate(items)
        ]
        rows.append(OutRow("topics", HOSTILE_PART, 1, 0, items["hostile_titles.xml"]))
        env.write(rows)
        bodies = {
            path: env.get(path).content
            for path in ("/feeds/news.rss", "/feeds/news.atom", "/feeds.opml", "/")
        }
        for path, body in bodies.items():
            assert not DANGER.search(body), (path, body)
        rss = feedparser.parse(bodies["/feeds/news.rss"], sanitize_html=False)
        atom = feedparser.parse(bodies["/feeds/news.atom"], sanitize_html=False)
        rss_root = etree.fromstring(bodies["/feeds/news.rss"])
        for name, expected in EXPECTED.items():
            [item] = [i for i in rss_root.iter("item") if came_from(i) == name]
            assert item.findtext("title") == expected["title"]
            assert item.findtext("author") == expected["author"]
            assert [c.text for c in item.findall("category")] == expected["categories"]
            assert item.findtext("source") == expected.get("source")
        titles = sorted(e["title"] for e in EXPECTED.values())
        assert sorted(e.title for e in rss.entries) == titles
        assert sorted(e.title for e in atom.entries) == titles
        assert sorted(e.author_detail.name for e in atom.entries) == ["Eve Smith", "Mallory Jones"]
        # a split value from the data is plain text where it is a title, quoted in URLs
        opml = etree.fromstring(bodies["/feeds.opml"])
        folder = [o for o in opml.iter("outline") if o.get("text") == "Topics"]
        assert [o.get("text") for o in folder[0]] == ["Topics — Weather"]
        assert "%3Cscript%3Ealert%285%29" in (folder[0][0].get("xmlUrl") or "")
        index = bodies["/"].decode()
        assert "<li id=" in index and ">Weather</a> —" in index
    finally:
        env.close()


def came_from(item: etree._Element) -> str:
    """Which test file a published item came from (by its guid)."""
    guid = item.findtext("guid") or ""
    return "hostile_subject.eml" if "hostile-1@example.org" in guid else "hostile_titles.xml"


@pytest.mark.parametrize("words", [1, 4000], ids=["short", "longer-than-kept"])
def test_an_item_in_many_feeds_and_formats_is_whole_in_each(words: int) -> None:
    # the sanitized item is kept (once per item and time) for every feed and format
    # that shows it: each document must still get an element of its own
    item = (
        "<item><title>Lava &amp; ash</title><link>https://ok.example/x</link>"
        f"<description>&lt;b&gt;hot&lt;/b&gt;{' lava' * words}"
        "&lt;script&gt;alert(1)&lt;/script&gt;</description></item>"
    )
    assert (len(item) > KEPT_CHARS) == (words > 1)
    first = render_rss(FEED, [entry(item)])
    for _ in range(2):
        assert render_rss(FEED, [entry(item)]) == first
        twice = etree.fromstring(render_atom(FEED, [entry(item), entry(item)]))
        titles = [e.findtext(f"{A}title") for e in twice.findall(f"{A}entry")]
        assert titles == ["Lava & ash", "Lava & ash"]
        assert not DANGER.search(etree.tostring(twice))


def test_a_malformed_stored_item_is_skipped_and_reported_for_each_feed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = entry("<item><title>fine</title></item>", 2)
    for stream in ("a", "b"):
        bad = StoredEntry(stream, "", "g1", 1, 1, "<item><title>broken</item>", 0.0, 0.0)
        channel = etree.fromstring(render_rss(FEED, [bad, good])).find("channel")
        assert channel is not None
        assert [i.findtext("title") for i in channel.findall("item")] == ["fine"]
    reported = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(reported) == 2
    assert "'a'" in reported[0] and "'b'" in reported[1]
    assert "mismatch" in reported[1]  # lxml's reason, kept with the item
