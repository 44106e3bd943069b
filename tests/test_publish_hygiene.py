"""Output hygiene, through the real HTTP server (uvicorn on 127.0.0.1, httpx).

* every response says ``X-Content-Type-Options: nosniff``; HTML pages send their
  Content-Security-Policy as a header (and keep the ``<meta>``);
* a 404 says where the feeds are listed and echoes nothing of the request;
* the URLs an item carries outside its HTML (a category's domain, enclosures, link,
  comments, source, media, related links, ``xml:base``, ``rdf:resource``/``about``)
  are http(s) in RSS, Atom, JSON Feed and the HTML page: a stored item with
  ``javascript:`` in each (what a mutator may build) is published without them; a
  category domain that is a name, a web URL or a URN stays.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from lxml import etree
from test_publish_server import Env

from roses_app.items import FEED_NAMESPACES
from roses_app.publish.headers import PAGE_CSP
from roses_app.store import OutRow

ATOM = FEED_NAMESPACES["atom"]
MEDIA = FEED_NAMESPACES["media"]
ITUNES = FEED_NAMESPACES["itunes"]
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
T = 1_700_000_000_000_000

HOSTILE = (
    f'<item xmlns:atom="{ATOM}" xmlns:media="{MEDIA}" xmlns:itunes="{ITUNES}">'
    "<title>Scripted everywhere</title><link>javascript:alert(1)</link>"
    "<description>Body</description><comments> JaVaScRiPt:alert(2)</comments>"
    '<guid isPermaLink="false">hostile-urls</guid>'
    '<category domain="javascript:alert(3)">scripts</category>'
    '<category domain="java&#9;script:alert(4)">more scripts</category>'
    '<category domain="data:text/html,x">data</category>'
    '<enclosure url="javascript:alert(5)" type="audio/mpeg" length="1"/>'
    '<source url="vbscript:msgbox(6)">Elsewhere</source>'
    '<media:content url="javascript:alert(7)" medium="image"/>'
    '<media:thumbnail url="data:image/png;base64,AAAA"/>'
    '<atom:link rel="related" href="javascript:alert(8)"/>'
    '<itunes:image href="javascript:alert(9)"/>'
    '<media:credit xml:base="javascript:alert(10)">C</media:credit>'
    f'<media:credit xmlns:rdf="{RDF}" rdf:resource="javascript:alert(11)">A</media:credit>'
    f'<media:credit xmlns:rdf="{RDF}" rdf:about="vbscript:msgbox(12)">B</media:credit></item>'
)
FINE = (
    "<item><title>Ordinary domains</title><link>https://example.org/fine</link>"
    '<description>Body</description><guid isPermaLink="false">fine-urls</guid>'
    '<category domain="Syndic8">1765</category>'
    '<category domain="https://example.org/tags">iceland</category>'
    '<category domain="urn:example:topics">volcano</category>'
    '<enclosure url="https://example.org/a.mp3" type="audio/mpeg" length="1"/></item>'
)
FORMATS = ("rss", "atom", "json", "html")
DANGER = re.compile(r"javascript|vbscript|data:", re.IGNORECASE)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    e.write([OutRow("news", "", T, 0, HOSTILE), OutRow("news", "", T + 1, 0, FINE)])
    yield e
    e.close()


def test_every_response_says_nosniff(env: Env) -> None:
    paths = ["/", "/feeds.opml", "/healthz", "/nothing", "/feeds/nope.rss"]
    paths += [f"/feeds/news.{fmt}" for fmt in FORMATS]
    for path in paths:
        headers = env.get(path).headers
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path  # no site frames any answer
    etag = env.get("/feeds/news.rss").headers["etag"]
    unchanged = env.get("/feeds/news.rss", **{"If-None-Match": etag})
    assert unchanged.status_code == 304
    assert unchanged.headers["x-content-type-options"] == "nosniff"


def test_html_pages_send_their_policy_as_a_header(env: Env) -> None:
    for path in ("/", "/feeds/news.html"):
        page = env.get(path)
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert policy == PAGE_CSP
        assert "script-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert '<meta http-equiv="Content-Security-Policy"' in page.text  # kept: harmless
    for path in ("/feeds/news.rss", "/feeds/news.json", "/healthz", "/nothing"):
        assert "content-security-policy" not in env.get(path).headers, path


@pytest.mark.parametrize(
    "path",
    [
        "/feeds/%3Cscript%3Ealert(1)%3C%2Fscript%3E.rss",
        "/feeds/news/%3Cimg%20src%3Dx%3E.atom",
        "/%3Cb%3Ereflected%3C%2Fb%3E",
        "/feeds/reflected-name.rss",
    ],
)
def test_not_found_echoes_nothing_of_the_request(env: Env, path: str) -> None:
    response = env.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert text.startswith("Not found.")
    assert f"{env.server.url}/ " in text and f"{env.server.url}/feeds.opml" in text
    for echoed in ("script", "alert", "img", "reflected", "<", "%3C"):
        assert echoed not in text, (path, echoed)


def documents(env: Env) -> dict[str, str]:
    bodies = {fmt: env.get(f"/feeds/news.{fmt}").text for fmt in FORMATS}
    assert set(bodies) == set(FORMATS) and all(bodies.values())
    return bodies


def test_no_dangerous_url_in_any_format(env: Env) -> None:
    for fmt, body in documents(env).items():
        # entities decoded (JSON escapes nothing here; the HTML page escapes attributes)
        assert not DANGER.search(html.unescape(body)), (fmt, body)
    rss = etree.fromstring(env.get("/feeds/news.rss").content)
    [hostile] = [i for i in rss.iter("item") if i.findtext("guid") == "hostile-urls"]
    assert [c.text for c in hostile.findall("category")] == ["scripts", "more scripts", "data"]
    assert [c.get("domain") for c in hostile.findall("category")] == [None, None, None]
    for gone in ("link", "comments", "enclosure", "source", f"{{{MEDIA}}}content"):
        assert hostile.find(gone) is None, gone
    credits = hostile.findall(f"{{{MEDIA}}}credit")  # kept, without their attributes
    assert [(c.text, dict(c.attrib)) for c in credits] == [("C", {}), ("A", {}), ("B", {})]


def test_names_web_urls_and_urns_stay_category_domains(env: Env) -> None:
    rss = etree.fromstring(env.get("/feeds/news.rss").content)
    [fine] = [i for i in rss.iter("item") if i.findtext("guid") == "fine-urls"]
    assert [c.get("domain") for c in fine.findall("category")] == [
        "Syndic8",
        "https://example.org/tags",
        "urn:example:topics",
    ]
    atom = etree.fromstring(env.get("/feeds/news.atom").content)
    entry = next(
        e for e in atom.iter(f"{{{ATOM}}}entry") if "Ordinary" in etree.tostring(e).decode()
    )
    schemes = {c.get("term"): c.get("scheme") for c in entry.iter(f"{{{ATOM}}}category")}
    # a name is no URI: it is no Atom scheme
    assert schemes == {
        "1765": None,
        "iceland": "https://example.org/tags",
        "volcano": "urn:example:topics",
    }
    json_item = env.get("/feeds/news.json").json()["items"][0]
    assert json_item["tags"] == ["1765", "iceland", "volcano"]
    assert json_item["attachments"][0]["url"] == "https://example.org/a.mp3"
