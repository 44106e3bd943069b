"""xml-ization of feed entries into canonical items.

Data-driven: every ``tests/data/feeds/NAME.xml`` sits next to ``NAME.expected.json``,
and every bundled ``examples/feeds/NAME.xml`` has ``tests/data/feeds/bundled/
NAME.expected.json``: the feed's title, link and format, then each item's exact
serialization and published time.  After an intended change of the canonical form,
regenerate them with ``ROSES_REGEN_EXPECTED=1 pytest tests/test_connector_xmlize.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from roses_app.connectors.xmlize import clean_text, parse_feed, xmlize_entry
from roses_app.errors import FeedParseError
from roses_app.items import FEED_NAMESPACES, parse_item, rfc822

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
DATA = TESTS / "data" / "feeds"
BUNDLED = REPO / "examples" / "feeds"
REGEN = os.environ.get("ROSES_REGEN_EXPECTED") == "1"

CONTENT = "{" + FEED_NAMESPACES["content"] + "}encoded"
ORDER = [
    "title",
    "link",
    "description",
    CONTENT,
    "pubDate",
    "guid",
    "author",
    "category",
    "enclosure",
    "source",
]

CASES = [
    (p, "https://feeds.example.org/data/" + p.name, DATA / (p.stem + ".expected.json"))
    for p in sorted(DATA.glob("*.xml"))
]
CASES += [
    (p, "file:///bundled/" + p.name, DATA / "bundled" / (p.stem + ".expected.json"))
    for p in sorted(BUNDLED.glob("*.xml"))
]


def snapshot(path: Path, url: str) -> dict[str, object]:
    parsed = parse_feed(path.read_bytes(), url, {})
    return {
        "url": url,
        "title": parsed.title,
        "link": parsed.link,
        "version": parsed.version,
        "items": [{"published": pub, "item": xml} for xml, pub in parsed.entries],
    }


@pytest.mark.parametrize(("feed", "url", "expected"), CASES, ids=[c[0].name for c in CASES])
def test_feed_matches_expected_items(feed: Path, url: str, expected: Path):
    got = snapshot(feed, url)
    if REGEN:
        expected.parent.mkdir(parents=True, exist_ok=True)
        expected.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", "utf-8")
    assert expected.exists(), f"missing {expected}; run with ROSES_REGEN_EXPECTED=1"
    assert got == json.loads(expected.read_text("utf-8"))


@pytest.mark.parametrize(("feed", "url", "expected"), CASES, ids=[c[0].name for c in CASES])
def test_items_are_canonical_and_deterministic(feed: Path, url: str, expected: Path):
    first = parse_feed(feed.read_bytes(), url, {})
    second = parse_feed(feed.read_bytes(), url, {})
    assert first.entries == second.entries  # same bytes: content-hash dedup works
    assert first.skipped == 0
    for xml, published in first.entries:
        item = parse_item(xml)
        assert item.tag == "item"
        core = [child.tag for child in item if child.tag in ORDER]
        assert core == sorted(core, key=ORDER.index), core
        # extension elements come after the core ones
        tags = [child.tag for child in item]
        last_core = max((i for i, t in enumerate(tags) if t in ORDER), default=-1)
        assert all(t not in ORDER for t in tags[last_core + 1 :])
        if published is None:
            assert item.find("pubDate") is None
        else:
            assert item.findtext("pubDate") == rfc822(published)
        guid = item.find("guid")
        if guid is not None:
            permalink = guid.get("isPermaLink")
            assert permalink == ("true" if guid.text == item.findtext("link") else "false")


def test_bundled_feeds_cover_the_demo_topics():
    items = []
    versions = set()
    for path in sorted(BUNDLED.glob("*.xml")):
        parsed = parse_feed(path.read_bytes(), path.as_uri(), {})
        versions.add(parsed.version)
        assert not parsed.bozo, (path.name, parsed.bozo_message)
        items += [parse_item(xml) for xml, _ in parsed.entries]
    assert {"rss20", "atom10", "rss10"} <= versions
    assert 30 <= len(items) <= 60

    def categories(item):
        return {c.text.lower() for c in item.findall("category")}

    volcano = [i for i in items if {"iceland", "volcano"} <= categories(i)]
    assert len(volcano) >= 10
    football = [
        i
        for i in items
        if "football" in (i.findtext("title") or "").lower() or "football" in categories(i)
    ]
    assert len(football) >= 5
    dc = "{" + FEED_NAMESPACES["dc"] + "}creator"
    assert sum(1 for i in items if i.find(dc) is not None) >= 20
    assert sum(1 for i in items if i.find("enclosure") is not None) >= 10
    assert sum(1 for i in items if i.find(CONTENT) is not None) >= 4
    assert all(i.findtext("guid") for i in items)
    assert all(i.findtext("pubDate") for i in items)


def test_control_characters_are_dropped():
    entry = {
        "title": "A\x00B\x01C\x1fD\ufffeE\ud800F \t\n\r G",
        "link": "https://example.org/\x0b1",
        "id": "id\x02",
        "summary": "x\x08y",
        "tags": [{"term": "t\x0c", "scheme": "s\x1b"}],
        "enclosures": [{"href": "https://example.org/a\x07.mp3", "type": "audio/mpeg\x01"}],
        "authors": [{"name": "Jo\x03"}],
    }
    xml, published = xmlize_entry(entry, {"title": "F\x04", "link": "https://example.org/"})
    assert published is None
    item = parse_item(xml)
    assert item.findtext("title") == "ABCDEF \t\n\r G"
    assert item.findtext("link") == "https://example.org/1"
    assert item.findtext("description") == "xy"
    assert item.find("category").get("domain") == "s"
    assert item.find("enclosure").get("url") == "https://example.org/a.mp3"
    assert item.findtext("source") == "F"


def test_clean_text_keeps_all_legal_characters():
    legal = "\t\n\r ~\u00e9\u4e2d\ud7ff\ue000\ufffd\U0001f30b\U0010ffff"
    assert clean_text(legal) == legal
    assert clean_text(None) == ""
    assert clean_text(42) == "42"


def test_minimal_and_odd_entries():
    assert xmlize_entry({}, {}) == ("<item/>", None)
    xml, _ = xmlize_entry(
        {
            "title": None,
            "tags": "not a list",
            "enclosures": [None, {"href": ""}, {"href": "https://e.org/x"}],
            "media_content": [{"url": ""}, {"medium": "image"}],
            "published_parsed": "garbage",
        },
        {"links": [{"rel": "self", "href": "https://e.org/feed"}]},
    )
    assert xml == (
        '<item><enclosure url="https://e.org/x" type="application/octet-stream" length="0"/>'
        '<source url="https://e.org/feed"/></item>'
    )


def test_published_time_falls_back_to_updated():
    when = time.strptime("2024-03-16 22:30:00", "%Y-%m-%d %H:%M:%S")
    _, published = xmlize_entry({"updated_parsed": when}, {})
    assert published == 1710628200 * 1_000_000
    _, published = xmlize_entry({"published_parsed": when, "updated_parsed": time.gmtime(0)}, {})
    assert published == 1710628200 * 1_000_000


def test_html_stays_text():
    xml, _ = xmlize_entry({"summary": "<p>Hi <b>there</b> &amp; bye</p>"}, {})
    assert "<b>" not in xml and "&lt;b&gt;" in xml
    assert parse_item(xml).findtext("description") == "<p>Hi <b>there</b> &amp; bye</p>"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   \n",
        b"<html><head><title>Not a feed</title></head><body><p>hello</p></body></html>",
        b"plain text, not XML at all",
        b'{"items": []}',
        b"<?xml version='1.0'?><root><child/></root>",
        b"<rss version='2.0'><chann",
        b"/etc/passwd",
    ],
)
def test_non_feeds_raise_feed_parse_error(body: bytes):
    with pytest.raises(FeedParseError):
        parse_feed(body, "https://example.org/x", {"Content-Type": "text/html"})


def test_empty_but_valid_feed_is_not_an_error():
    body = b'<?xml version="1.0"?><rss version="2.0"><channel><title>Quiet</title></channel></rss>'
    parsed = parse_feed(body, "https://example.org/x", {"Content-Type": "application/rss+xml"})
    assert parsed.entries == [] and parsed.title == "Quiet" and parsed.version == "rss20"


def test_entity_expansion_bomb_is_harmless():
    lol = b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1)) * 10) for i in range(1, 10))
    body = (
        b'<?xml version="1.0"?><!DOCTYPE rss [<!ENTITY lol0 "lol">' + lol + b"]>"
        b'<rss version="2.0"><channel><title>T</title>'
        b"<item><title>&lol9;</title><guid>g</guid></item></channel></rss>"
    )
    started = time.monotonic()
    parsed = parse_feed(body, "https://example.org/x", {"Content-Type": "application/xml"})
    assert time.monotonic() - started < 10
    for xml, _ in parsed.entries:
        assert len(xml) < 10_000
