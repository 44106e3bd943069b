"""What real feeds do that the formats' examples do not, from the connector to every
published format.

* rbc.ru lists related stories as ``<link>`` elements nested in its items
  (``tests/data/feeds/rbc_related_links.xml``, and ``rbc_github49.xml``: the first four
  items of the real capture in the rss-parser project's ``samples/rss/github-49``):
  each item keeps its own link.
* Titles that look like markup are text in RSS (escaped or in CDATA), an Atom
  ``type="html"`` title is the text it shows (``rss20_markup_titles.xml``,
  ``atom10_html_titles.xml``), in RSS, Atom, JSON Feed and the HTML page alike.
* An item without a title gets none in RSS and JSON Feed; Atom, which requires one,
  derives it; the HTML page labels it as having none.
* ``tests/data/publish/validator_warnings.rss`` and ``same_updated.atom`` made the W3C
  Feed Validator warn once republished (undated items received together, entries of
  one date, ``dc:rights`` holding HTML, an address without a name): no more.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path

import feedparser
import pytest
from lxml import etree
from test_valid_feeds import validate

from roses_app.connectors.entrylinks import entry_link
from roses_app.connectors.xmlize import parse_feed
from roses_app.items import FEED_NAMESPACES, MICROS
from roses_app.publish import FeedInfo, render_atom, render_rss
from roses_app.publish.entries import received
from roses_app.publish.feedpage import UNTITLED, render_feed_page
from roses_app.publish.jsonfeed import render_json
from roses_app.store import StoredEntry
from roses_app.store_rows import entry_guid

DATA = Path(__file__).parent / "data"
FEEDS, PUBLISH = DATA / "feeds", DATA / "publish"
A = f"{{{FEED_NAMESPACES['atom']}}}"
T = 1_717_315_200 * MICROS  # 2024-06-02T08:00:00Z: when the items were received
FEED = FeedInfo(
    name="real",
    stream="real",
    part="",
    title="Real feeds",
    description="Republished",
    keep=50,
    rss_url="https://roses.example.org/feeds/real.rss",
    atom_url="https://roses.example.org/feeds/real.atom",
    html_url="https://roses.example.org/feeds/real.html",
    json_url="https://roses.example.org/feeds/real.json",
)
Renderer = Callable[[FeedInfo, Sequence[StoredEntry]], bytes]
RENDERERS: dict[str, Renderer] = {
    "rss": render_rss,
    "atom": render_atom,
    "json": render_json,
    "html": render_feed_page,
}


def items_of(name: str, url: str) -> list[str]:
    parsed = parse_feed((FEEDS / name).read_bytes(), url)
    assert parsed.skipped == 0
    return [xml for xml, _published in parsed.entries]


def stored(items: Sequence[str], *, seq: Callable[[int], int] = lambda n: n) -> list[StoredEntry]:
    """``items`` as the store gives them back: newest (the last) first, one poll."""
    entries = [
        StoredEntry("real", "", entry_guid(xml), T, seq(n), xml, T / MICROS, T / MICROS)
        for n, xml in enumerate(items)
    ]
    return entries[::-1]


def publish(entries: Sequence[StoredEntry]) -> dict[str, bytes]:
    return {fmt: render(FEED, entries) for fmt, render in RENDERERS.items()}


# -- an item's own link --------------------------------------------------------------


def test_each_item_keeps_its_own_link_not_a_related_one() -> None:
    body = (FEEDS / "rbc_related_links.xml").read_bytes()
    # the oracle: the <link> children of each <item> (the standard library's parser)
    own = [item.findtext("link") for item in ET.fromstring(body).iter("item")]
    assert own[3] is None  # the last item names no link of its own
    # the bug the capture showed: feedparser's link is the last related story
    fp_links = [e.get("link") for e in feedparser.parse(body).entries]
    assert sum(fp != mine for fp, mine in zip(fp_links, own, strict=True)) == 3
    items = items_of("rbc_related_links.xml", "https://rssexport.rbc.ru/rbcnews/full.rss")
    links = [etree.fromstring(xml).findtext("link") for xml in items]
    assert links == own
    rss = etree.fromstring(render_rss(FEED, stored(items)))
    assert [i.findtext("link") for i in rss.iter("item")] == own[::-1]


def test_the_real_rbc_capture_keeps_every_items_own_link() -> None:
    """The real capture (rss-parser's ``samples/rss/github-49``, its first four items):
    ``<link url=...>`` related stories nested in ``rbc_news:related_links``."""
    body = (FEEDS / "rbc_github49.xml").read_bytes()
    own = [item.findtext("link") for item in ET.fromstring(body).iter("item")]
    assert len(own) == 4 and all(own)
    fp_links = [e.get("link") for e in feedparser.parse(body).entries]
    assert fp_links != own  # feedparser alone takes a related story's link
    items = items_of("rbc_github49.xml", "https://rssexport.rbc.ru/rbcnews/news/30/full.rss")
    assert [etree.fromstring(xml).findtext("link") for xml in items] == own
    titles = [etree.fromstring(xml).findtext("title") for xml in items]
    assert titles[0] == "Чешский футболист пропустит Евро из-за падения с велосипеда"


def link(href: str, rel: str = "alternate", kind: str = "text/html") -> dict[str, str]:
    return {"href": href, "rel": rel, "type": kind}


@pytest.mark.parametrize(
    ("links", "own", "expected"),
    [
        # its own links unknown (the document was no XML lxml reads): the first
        ([link("https://a.example/own"), link("https://a.example/rel")], None, "own"),
        # written relative in the document, resolved by feedparser
        ([link("https://a.example/rel"), link("https://a.example/own")], ["/own"], "own"),
        # an Atom entry's alternates: the first HTML one, not a PDF, not "related"
        (
            [
                link("https://a.example/x.pdf", kind="application/pdf"),
                link("https://a.example/related", rel="related"),
                link("https://a.example/own"),
                link("https://a.example/fr/own"),
            ],
            ["https://a.example/x.pdf", "https://a.example/own", "https://a.example/fr/own"],
            "own",
        ),
        # every link of it is nested in another element: none is its own
        ([link("https://a.example/rel")], [], ""),
        # its own link written in a way not recognised: the first, as when unknown
        ([link("https://a.example/own"), link("https://a.example/rel")], ["%%"], "own"),
    ],
)
def test_entry_link(links: list[dict[str, str]], own: list[str] | None, expected: str) -> None:
    entry = {"links": links, "link": links[-1]["href"]}
    assert entry_link(entry, own) == (f"https://a.example/{expected}" if expected else "")


# -- titles ----------------------------------------------------------------------------

MARKUP_TITLE = "<p>Entry Title</p>"


def titles(fmt: str, body: bytes) -> list[str | None]:
    """Each item's title in a published document, as a reader gets it (None: none)."""
    if fmt == "rss":
        return [i.findtext("title") for i in etree.fromstring(body).iter("item")]
    if fmt == "atom":
        return [e.findtext(f"{A}title") for e in etree.fromstring(body).iter(f"{A}entry")]
    if fmt == "json":
        return [i.get("title") for i in json.loads(body)["items"]]
    page = body.decode()
    return [re.sub(r"<a [^>]*>|</a>", "", h) for h in re.findall(r"<h2>(.*?)</h2>", page)]


def test_titles_are_text_as_the_feed_declares_them_in_every_format() -> None:
    items = items_of("rss20_markup_titles.xml", "https://titles.example.org/feed.rss")
    items += items_of("atom10_html_titles.xml", "https://titles.example.org/feed.atom")
    documents = publish(stored(items))
    expected = [
        MARKUP_TITLE,  # RSS, escaped
        MARKUP_TITLE,  # RSS, CDATA
        "Fish & chips",  # RSS, a double-escaped ampersand
        "Script links",
        "Bold & brave",  # Atom type="html": the text it shows
        MARKUP_TITLE,  # Atom type="text": the text, markup-like or not
        "An XHTML title",  # Atom type="xhtml"
    ][::-1]
    for fmt in ("rss", "atom", "json"):
        assert titles(fmt, documents[fmt]) == expected, fmt
    atom = etree.fromstring(documents["atom"])
    assert {t.get("type") for t in atom.iter(f"{A}title")} == {"text"}
    # the page escapes the text: it shows the markup, it does not render it
    page = documents["html"].decode()
    assert page.count("&lt;p&gt;Entry Title&lt;/p&gt;") == 3 and MARKUP_TITLE not in page
    assert titles("html", documents["html"]) == [
        t.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") for t in expected
    ]


def test_untitled_items_get_no_invented_title() -> None:
    described = (
        "<item><link>https://harbour.example.org/fog</link>"
        "<description>Fog signal tests.</description><guid>https://harbour.example.org/fog</guid>"
        "</item>"
    )
    bare = "<item><link>https://harbour.example.org/bare</link><guid>bare-1</guid></item>"
    documents = publish(stored([described, bare]))
    assert titles("rss", documents["rss"]) == [None, None]
    assert titles("json", documents["json"]) == [None, None]
    # Atom requires a title: only there is one derived (the link)
    assert titles("atom", documents["atom"]) == [
        "https://harbour.example.org/bare",
        "https://harbour.example.org/fog",
    ]
    assert documents["html"].decode().count(UNTITLED) == 2
    # RSS asks a title or a description: the bare item has an empty description
    rss_items = list(etree.fromstring(documents["rss"]).iter("item"))
    assert [i.findtext("description") for i in rss_items] == ["", "Fog signal tests."]


# -- the W3C Feed Validator ------------------------------------------------------------


def messages(found: dict[str, list[str]]) -> list[str]:
    """The validator's messages without their positions."""
    return sorted(re.sub(r"^line \d+, column \d+: ", "", m) for ms in found.values() for m in ms)


WARNINGS = [
    "Email address is missing real name (2 occurrences)",
    "Two entries with the same value for atom:updated",
    "dc:rights should not contain HTML",
]


def test_republished_documents_do_not_warn(tmp_path: Path) -> None:
    inputs = [PUBLISH / "validator_warnings.rss", PUBLISH / "same_updated.atom"]
    assert messages(validate(inputs)) == WARNINGS  # the fixtures provoke each warning
    items: list[str] = []
    for path in inputs:
        parsed = parse_feed(path.read_bytes(), f"https://harbour.example.org/{path.name}")
        assert parsed.dropped == 0
        items += [xml for xml, _ in parsed.entries]
    # received together as outputs of one event (a join, a mutator): one (ts, seq)
    entries = stored(items, seq=lambda n: 7)
    undated = [e for e in entries if "<pubDate>" not in e.item]
    assert len(undated) == 3 and len({received(e) for e in undated}) == 1
    files = []
    for fmt in ("rss", "atom"):
        files.append(tmp_path / f"real.{fmt}")
        files[-1].write_bytes(RENDERERS[fmt](FEED, entries))
    assert messages(validate(files)) == []
    atom = etree.fromstring(files[1].read_bytes())
    updated = [e.findtext(f"{A}updated") or "" for e in atom.iter(f"{A}entry")]
    assert len(set(updated)) == len(updated) == 5
    # the undated ones: when received, in the order of the document (newest first)
    received_at = [u for u in updated if u.startswith("2024-06-02T08:00:00.0000")]
    assert len(received_at) == 3 and received_at == sorted(received_at, reverse=True)


def test_markup_like_titles_only_warn_that_they_look_like_html(tmp_path: Path) -> None:
    """The validator takes any known HTML end tag in a title for HTML: kept as text (as
    the RSS title says), ``<p>Entry Title</p>`` is that warning and no other."""
    items = items_of("rss20_markup_titles.xml", "https://titles.example.org/feed.rss")
    files = []
    for fmt in ("rss", "atom"):
        files.append(tmp_path / f"titles.{fmt}")
        files[-1].write_bytes(RENDERERS[fmt](FEED, stored(items)))
    found = messages(validate(files))
    assert found and all(re.match(r"title should not contain HTML", m) for m in found), found
