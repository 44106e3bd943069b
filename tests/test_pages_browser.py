"""The pages people read (the index and a page per feed), in a real browser.

Debian's ``chromium-headless-shell`` loads each page from the real server on 127.0.0.1:
``--screenshot`` takes a picture at a phone's width (375 px) and ``--dump-dom`` gives
the document after its scripts (if any) ran.  Items carry script payloads that would set
``document.title``; the title must stay the feed's.  The width check runs the page in a
375 px frame of a harness page served from the same origin (a small proxy in front of
the server), whose own script measures every element of the page.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from lxml import html as lxml_html
from publish_support import publish_config
from system_packages import require

from roses_app.config.model import Config, Publish
from roses_app.publish import HttpServer, create_app
from roses_app.store import OutRow, Store

# skipped before any fixture when the browser is missing (failed under CI)
pytestmark = pytest.mark.requires("chromium")

PHONE = (375, 740)
T0 = 1_800_000_000_000_000
PAYLOAD_IMG = "<img src=x onerror=\"document.title='pwned'\">"
PAYLOAD_SCRIPT = "<script>document.title='pwned'</script>"
PAGES = {  # path -> the title the page must keep, and a text it shows
    "/": ("ROSES feeds", "Climate crisis"),
    "/feeds/news.html": ("News", "Story 2"),
    "/feeds/topics/Climate%20crisis.html": ("Topics — Climate crisis", "Story 2"),
    "/sources.html": ("ROSES sources", "HTTP 500 from https://a-very-long-host-name"),
}
SOURCES = {  # what /sources.html lists: the daemon's listing (roses_app.connectors.listing)
    "total": 2,
    "page": 1,
    "per_page": 100,
    "sources": [
        {"name": f"source-{n}", "url": f"https://a-very-long-host-name.example.org/{'x' * 60}/{n}",
         "status": "error" if n else "ok", "last_poll": 1.7e9, "next_poll": 1.7e9 + 600,
         "interval": 600.0, "why": f"rate 2.4 items/h: about one new item per poll {PAYLOAD_IMG}",
         "lag": 0.4, "polls": 12, "not_modified_share": 0.5, "items_per_day": 57.6,
         "failures": n, "last_error": f"HTTP 500 from https://a-very-long-host-name.example.org/"
         f"{'y' * 50} {PAYLOAD_SCRIPT}" if n else ""}
        for n in range(2)
    ],
}  # fmt: skip


# -- a PNG reader (8-bit RGB/RGBA, what Chromium writes): enough to see the pixels ------


def _unfilter(rows: bytes, width: int, bpp: int, height: int) -> list[bytearray]:
    stride = width * bpp
    out: list[bytearray] = []
    prev = bytearray(stride)
    pos = 0
    for _ in range(height):
        kind, line = rows[pos], bytearray(rows[pos + 1 : pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        out.append(line)
        prev = line
    return out


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, pixels) of an 8-bit RGB or RGBA PNG, pixels as RGB bytes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, "unexpected PNG format"
    bpp = 3 if colour == 2 else 4
    rows = _unfilter(zlib.decompress(idat), width, bpp, height)
    pixels = [bytes(r[i : i + 3]) for r in rows for i in range(0, len(r), bpp)]
    return width, height, pixels


# -- the server, its data, and the browser -------------------------------------------


def make_config(tmp_path: Path) -> Config:
    return publish_config(tmp_path, Publish("News", "Every story we read"))


def story(n: int, base: str) -> str:
    """An item whose text carries script payloads and a very long word, linking home."""
    long_word = "Unbreakable" * 30
    description = (
        f"<p>Story {n} {PAYLOAD_IMG} {PAYLOAD_SCRIPT} {long_word}</p>"
        f'<p><a href="{base}/feeds.opml">the list</a></p>'
        '<table><tr><td style="width:900px">a wide cell</td></tr></table>'
    )
    return (
        "<item xmlns:content='http://purl.org/rss/1.0/modules/content/'>"
        f"<title>Story {n} &lt;script&gt;document.title='pwned'&lt;/script&gt;</title>"
        f"<link>{base}/feeds/news.rss</link>"
        f"<description>{_escape(description)}</description>"
        f"<content:encoded>{_escape(description)}</content:encoded>"
        "<category>Climate crisis</category>"
        f"<guid isPermaLink='false'>story-{n}</guid>"
        f"<pubDate>{22 - n} Nov 2026 10:00:00 GMT</pubDate></item>"
    )


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Site:
    """ROSES's server on 127.0.0.1 with a few stories, and a same-origin harness proxy."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = Store(tmp_path / "store.sqlite")
        app = create_app(
            make_config(tmp_path), self.store, lambda: {"ok": True}, sources=lambda _: SOURCES
        )
        self.server = HttpServer(app, "127.0.0.1", 0)
        self.server.start()
        base = self.server.url
        rows = []
        for n in range(3):
            item = story(n, base)
            rows += [
                OutRow("news", "", T0 + n, 0, item),
                OutRow("topics", "Climate crisis", T0 + n, 0, item),
            ]
        self.store.write_batch("q", 0, rows)
        self.proxy = _harness_proxy(base)
        threading.Thread(target=self.proxy.serve_forever, daemon=True).start()
        self.proxy_url = f"http://127.0.0.1:{self.proxy.server_address[1]}"

    def close(self) -> None:
        self.proxy.shutdown()
        self.proxy.server_close()
        self.server.stop()
        self.store.close()


HARNESS = """<!DOCTYPE html><html><head><title>harness</title></head><body style="margin:0">
<iframe id="page" src="%s" width="%d" height="%d" style="border:0"></iframe>
<pre id="result">pending</pre>
<script>
document.getElementById('page').addEventListener('load', function () {
  var doc = this.contentDocument, width = this.contentWindow.innerWidth, wide = [];
  doc.querySelectorAll('body *').forEach(function (e) {
    var r = e.getBoundingClientRect();
    if (r.width > 0 && (r.right > width + 0.5 || r.left < -0.5))
      wide.push(e.tagName + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  });
  document.getElementById('result').textContent = JSON.stringify(
    {width: width, scrollWidth: doc.documentElement.scrollWidth, wide: wide});
});
</script></body></html>"""


def _harness_proxy(upstream: str) -> ThreadingHTTPServer:
    """/harness?PATH: HARNESS around PATH; any other path: what ROSES answers for it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/harness?"):
                body = (HARNESS % (self.path.partition("?")[2], *PHONE)).encode()
                status, kind = 200, "text/html; charset=utf-8"
            else:
                answer = httpx.get(upstream + self.path, timeout=10)
                body, status = answer.content, answer.status_code
                kind = answer.headers.get("content-type", "application/octet-stream")
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test's output is the assertions

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    s = Site(tmp_path)
    yield s
    s.close()


class Browser:
    def __init__(self, binary: Path, profile: Path) -> None:
        self.binary = binary
        self.profile = profile

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [
            str(self.binary),
            f"--user-data-dir={self.profile}",
            "--hide-scrollbars",
            "--disable-gpu",
            "--virtual-time-budget=5000",  # let the page (and its frames) load
            f"--window-size={PHONE[0]},{PHONE[1]}",
            *args,
        ]
        if os.geteuid() == 0:
            command.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    def dom(self, url: str) -> lxml_html.HtmlElement:
        return lxml_html.fromstring(self.run("--dump-dom", url).stdout)

    def screenshot(self, url: str, target: Path) -> Path:
        self.run(f"--screenshot={target}", url)
        return target


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(require("chromium"), tmp_path / "chromium-profile")


# -- the tests -----------------------------------------------------------------------


def test_the_payload_runs_in_this_browser_when_not_sanitized(
    browser: Browser, tmp_path: Path
) -> None:
    """The control: the test's payloads do change the title when a page carries them."""
    page = tmp_path / "raw.html"
    page.write_text(f"<html><head><title>kept</title></head><body>{PAYLOAD_SCRIPT}</body></html>")
    assert browser.dom(page.as_uri()).findtext(".//title") == "pwned"
    page.write_text(f"<html><head><title>kept</title></head><body>{PAYLOAD_IMG}</body></html>")
    assert browser.dom(page.as_uri()).findtext(".//title") == "pwned"


@pytest.mark.parametrize("path", PAGES)
def test_page_in_a_browser(site: Site, browser: Browser, tmp_path: Path, path: str) -> None:
    url = site.server.url + path
    dom = browser.dom(url)
    # no script from item content ran, and none is left in the document
    title, text = PAGES[path]
    assert dom.findtext(".//title") == title
    assert not dom.xpath("//script")
    assert not [a for e in dom.iter() for a in getattr(e, "attrib", {}) if a.startswith("on")]
    assert text in dom.text_content()
    # usable on a phone: a viewport meta, and nothing wider than a 375 px screen
    viewport = dom.xpath("//meta[@name='viewport']/@content")
    assert viewport and "width=device-width" in viewport[0]
    measured = browser.dom(f"{site.proxy_url}/harness?{path}").findtext(".//pre[@id='result']")
    layout = json.loads(measured or "null")
    assert layout["width"] == PHONE[0]
    assert layout["wide"] == [] and layout["scrollWidth"] <= PHONE[0], layout

    # every link answers 200
    links = {urljoin(url, str(h)) for h in dom.xpath("//a/@href | //link/@href")}
    assert links
    with httpx.Client(timeout=10) as client:
        statuses = {link: client.get(link).status_code for link in links}
    assert set(statuses.values()) == {200}, statuses

    # a screenshot at a phone's width, not blank
    shot = browser.screenshot(url, tmp_path / f"phone{path.replace('/', '_')}.png")
    print(f"screenshot of {path}: {shot}")
    width, height, pixels = png_pixels(shot)
    assert (width, height) == PHONE
    background = max(set(pixels), key=pixels.count)
    drawn = sum(1 for p in pixels if p != background)
    assert len(set(pixels)) > 10 and drawn > len(pixels) // 100, (len(set(pixels)), drawn)


def test_feed_page_links_its_formats_and_the_index_links_pages(
    site: Site, browser: Browser
) -> None:
    base = site.server.url
    page = browser.dom(base + "/feeds/news.html")
    subscribe = {a.text_content(): a.get("href") for a in page.xpath("//p[@class='subscribe']/a")}
    assert subscribe == {
        "RSS": f"{base}/feeds/news.rss",
        "Atom": f"{base}/feeds/news.atom",
        "JSON Feed": f"{base}/feeds/news.json",
    }
    titles = [h2.text_content() for h2 in page.xpath("//article/h2")]
    assert titles == ["Story 2", "Story 1", "Story 0"]
    index = browser.dom(base + "/")
    hrefs = index.xpath("//a/@href")
    assert f"{base}/feeds/news.html" in hrefs
    assert f"{base}/feeds/topics/Climate%20crisis.html" in hrefs
    newest = index.xpath(f"//li[a[@href='{base}/feeds/news.html']]//time/@datetime")
    # the latest date among the items, not the last one read: story 0 is dated latest
    assert newest == ["2026-11-22T10:00:00Z"]
    ids = index.xpath("//@id")
    assert len(ids) == len(set(ids))
