"""No script, event handler or javascript: URL reaches a subscriber; the text does.

Hostile items go through the real renderers (RSS and Atom), and what comes out is
read back three ways: as XML, as HTML (lxml.html, what a browser-based reader would
build) and with feedparser with its own sanitizer turned off (a reader that trusts us).
"""

from __future__ import annotations

import html
import re

import feedparser
import pytest
from lxml import etree
from lxml import html as lxml_html

from roses_app.publish import FeedInfo, render_atom, render_rss
from roses_app.publish.render import ATOM_NS
from roses_app.publish.sanitize import safe_url, sanitize_html, sanitize_item
from roses_app.store import StoredEntry

CONTENT = "http://purl.org/rss/1.0/modules/content/"
MEDIA = "http://search.yahoo.com/mrss/"

HOSTILE_HTML = [
    "<p>Hello <script>alert('x')</script>world</p>",
    "<p>Hello <SCRIPT SRC=//evil.example/x.js></SCRIPT>world</p>",
    "<p>Hello <img src=x onerror=alert(1)>world</p>",
    '<p>Hello <a href="javascript:alert(1)">world</a></p>',
    '<p>Hello <a href=" JaVaScRiPt:alert(1)">world</a></p>',
    '<p>Hello <a href="jav&#x09;ascript:alert(1)">world</a></p>',
    '<p>Hello <a href="&#106;avascript:alert(1)">world</a></p>',
    '<p>Hello <a href="vbscript:msgbox(1)">world</a></p>',
    '<p>Hello <a href="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">world</a></p>',
    "<p>Hello <svg onload=alert(1)><circle/></svg>world</p>",
    '<p>Hello <iframe src="https://evil.example/"></iframe>world</p>',
    "<p>Hello <style>body{background:url(javascript:alert(1))}</style>world</p>",
    '<p style="background:url(javascript:alert(1))">Hello world</p>',
    '<p>Hello <form action="javascript:alert(1)"><input onfocus=alert(1)></form>world</p>',
    '<p>Hello <object data="javascript:alert(1)"></object>world</p>',
    '<p>Hello <meta http-equiv="refresh" content="0;url=javascript:alert(1)">world</p>',
    "<p onmouseover=alert(1) onclick='alert(2)'>Hello world</p>",
    '<p>Hello <math><mi xlink:href="javascript:alert(1)">x</mi></math>world</p>',
    "<p>Hello <!--<script>alert(1)</script>-->world</p>",
    "<p>Hello <scr<script>ipt>alert(1)</script>world</p>",
]
DANGER = re.compile(r"<\s*script|\bon[a-z]+\s*=|javascript:|vbscript:|data:text/html", re.I)


def entry(item: str, n: int = 1) -> StoredEntry:
    return StoredEntry("evil", "", f"g{n}", 1_700_000_000_000_000 + n, n, item, 0.0, 0.0)


FEED = FeedInfo(
    name="evil",
    stream="evil",
    part="",
    title="Evil",
    description="hostile items",
    keep=50,
    rss_url="http://h/feeds/evil.rss",
    atom_url="http://h/feeds/evil.atom",
    html_url="http://h/#feed-evil",
)


def hostile_item(n: int, markup: str) -> str:
    return (
        f'<item xmlns:content="{CONTENT}" xmlns:media="{MEDIA}">'
        f"<title>Item {n}</title><link>https://ok.example/{n}</link>"
        f"<description>{html.escape(markup)}</description>"
        f"<content:encoded><![CDATA[{markup}<p>more</p>]]></content:encoded>"
        f"<guid>g{n}</guid></item>"
    )


def _normalized(text: str) -> str:
    """Entity-decoded, without the characters browsers ignore inside a URL scheme."""
    return re.sub(r"[\x00-\x20]", "", html.unescape(text))


def assert_harmless(fragment: str) -> None:
    assert not DANGER.search(fragment), fragment
    assert "javascript:" not in _normalized(fragment).lower(), fragment
    if not fragment.strip():
        return
    tree = lxml_html.fragment_fromstring(fragment, create_parent="div")
    for element in tree.iter():
        if not isinstance(element.tag, str):
            continue
        assert element.tag not in {"script", "style", "iframe", "object", "svg", "form"}
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), (name, fragment)
            if name.lower() in {"href", "src", "action", "data", "xlink:href"}:
                assert safe_url(value), (name, value)


@pytest.mark.parametrize("markup", HOSTILE_HTML)
def test_sanitize_html_removes_the_attack_and_keeps_the_text(markup: str) -> None:
    clean = sanitize_html(markup)
    assert_harmless(clean)
    text = lxml_html.fragment_fromstring(clean or "<p></p>", create_parent="div").text_content()
    assert "Hello" in text and "world" in text


def test_rss_items_are_sanitized() -> None:
    entries = [entry(hostile_item(n, m), n) for n, m in enumerate(HOSTILE_HTML)]
    body = render_rss(FEED, entries)
    root = etree.fromstring(body)
    items = root.findall("channel/item")
    assert len(items) == len(HOSTILE_HTML)
    for item in items:
        for tag in ("description", f"{{{CONTENT}}}encoded"):
            fragment = item.findtext(tag) or ""
            assert_harmless(fragment)
            assert "Hello" in fragment and "world" in fragment
    assert b"<script" not in body.lower() and b"&lt;script" not in body.lower()


def test_atom_entries_are_sanitized() -> None:
    entries = [entry(hostile_item(n, m), n) for n, m in enumerate(HOSTILE_HTML)]
    root = etree.fromstring(render_atom(FEED, entries))
    summaries = root.findall(f"{{{ATOM_NS}}}entry/{{{ATOM_NS}}}summary")
    contents = root.findall(f"{{{ATOM_NS}}}entry/{{{ATOM_NS}}}content")
    assert len(summaries) == len(contents) == len(HOSTILE_HTML)
    for element in (*summaries, *contents):
        assert element.get("type") == "html"
        assert_harmless(element.text or "")
        assert "world" in (element.text or "")


@pytest.mark.parametrize("render", [render_rss, render_atom])
def test_feedparser_without_its_own_sanitizer_sees_clean_html(render: object) -> None:
    entries = [entry(hostile_item(n, m), n) for n, m in enumerate(HOSTILE_HTML)]
    body = render(FEED, entries)  # type: ignore[operator]
    parsed = feedparser.parse(body, sanitize_html=False)
    assert not parsed.bozo, parsed.get("bozo_exception")
    assert len(parsed.entries) == len(HOSTILE_HTML)
    for item in parsed.entries:
        assert_harmless(item.summary)
        assert "Hello" in item.summary and "world" in item.summary
        for content in item.get("content", []):
            assert_harmless(content.value)
        assert item.link.startswith("https://ok.example/")


def test_markup_a_mutator_built_as_elements_is_sanitized_too() -> None:
    item = (
        '<item><title>t</title><description><p onclick="x()">Hi '
        "<script>alert(1)</script><b>there</b></p></description><guid>g</guid></item>"
    )
    root = etree.fromstring(render_rss(FEED, [entry(item)]))
    description = root.find("channel/item/description")
    assert description is not None and len(description) == 0  # escaped text now
    assert description.text == "<p>Hi <b>there</b></p>"


def test_urls_outside_the_html() -> None:
    item = (
        f'<item xmlns:media="{MEDIA}"><title>t</title>'
        "<link>javascript:alert(1)</link><comments> JAVASCRIPT:alert(2)</comments>"
        '<enclosure url="javascript:alert(3)" type="audio/mpeg" length="1"/>'
        '<enclosure url="https://ok.example/a.mp3" type="audio/mpeg" length="1"/>'
        '<media:content url="vbscript:x" medium="image"/>'
        '<guid>javascript:alert(4)</guid><source url="data:text/html,x">s</source></item>'
    )
    for body in (render_rss(FEED, [entry(item)]), render_atom(FEED, [entry(item)])):
        assert b"javascript" not in body.lower() or b'isPermaLink="false"' in body
        parsed = feedparser.parse(body, sanitize_html=False)
        first = parsed.entries[0]
        assert not first.get("link", "").lower().startswith("javascript")
        hrefs = [link.get("href", "") for link in first.get("links", [])]
        assert all(safe_url(h) for h in hrefs), hrefs
        assert "https://ok.example/a.mp3" in hrefs
    rss = etree.fromstring(render_rss(FEED, [entry(item)])).find("channel/item")
    assert rss is not None
    assert rss.find("link") is None and rss.find("comments") is None
    # an element whose URL is gone is gone too: RSS requires the URL
    assert [e.get("url") for e in rss.findall("enclosure")] == ["https://ok.example/a.mp3"]
    assert rss.find(f"{{{MEDIA}}}content") is None
    assert rss.find("guid").get("isPermaLink") == "false"  # type: ignore[union-attr]
    assert rss.find("source") is None


def test_harmless_items_keep_their_text_and_links() -> None:
    item = (
        "<item><title>Caf\u00e9 &amp; co</title><link>https://ok.example/x</link>"
        '<description>&lt;p&gt;A &amp;amp; B &lt;a href="https://ok.example/y"&gt;y&lt;/a&gt;'
        ' &lt;img src="/rel.png" alt="r"&gt;&lt;/p&gt; 5 &amp;lt; 6</description>'
        "<guid>https://ok.example/x</guid></item>"
    )
    out = etree.fromstring(render_rss(FEED, [entry(item)])).find("channel/item")
    assert out is not None
    assert out.findtext("title") == "Caf\u00e9 & co"
    assert out.findtext("link") == "https://ok.example/x"
    assert out.find("guid").get("isPermaLink") is None  # type: ignore[union-attr]
    description = out.findtext("description") or ""
    assert 'href="https://ok.example/y"' in description and 'src="/rel.png"' in description
    assert "A &amp; B" in description and "5 &lt; 6" in description


def test_sanitizing_is_a_pure_function() -> None:
    items = [hostile_item(n, m) for n, m in enumerate(HOSTILE_HTML)]
    once = [etree.tostring(sanitize_item(etree.fromstring(x))) for x in items]
    twice = [etree.tostring(sanitize_item(etree.fromstring(x))) for x in once]
    assert once == twice
    assert render_rss(FEED, [entry(items[0])]) == render_rss(FEED, [entry(items[0])])


@pytest.mark.parametrize(
    ("url", "safe"),
    [
        ("https://a.example/", True),
        ("/relative/path", True),
        ("//host/path", True),
        ("?q=a:b", True),
        ("mailto:a@b.example", True),
        ("javascript:alert(1)", False),
        ("  JavaScript:alert(1)", False),
        ("java\tscript:alert(1)", False),
        ("java\nscript:alert(1)", False),
        ("\x01javascript:alert(1)", False),
        ("vbscript:x", False),
        ("data:text/html,x", False),
        ("weird scheme:x", False),
    ],
)
def test_safe_url(url: str, safe: bool) -> None:
    assert safe_url(url) is safe
