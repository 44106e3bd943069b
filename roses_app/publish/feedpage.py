"""The HTML page of one feed, ``/feeds/NAME.html``: its latest items, for people.

The items are the JSON Feed items (:mod:`.jsonfeed`), so the page shows what the feeds
carry: plain-text titles (escaped here), sanitized HTML content; an item without a title
is labelled as such, not given one.  The page also forbids scripts itself (a
Content-Security-Policy, sent as a header by the server and repeated in a ``<meta>``),
so a gap in sanitizing would still run nothing.  It fits a phone's width: a viewport
meta, and content that wraps or shrinks.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from roses_app.publish.jsonfeed import JSON_FEED_MEDIA_TYPE, json_items
from roses_app.publish.render import ATOM_MEDIA_TYPE, RSS_MEDIA_TYPE, FeedInfo
from roses_app.publish.sanitize import label, plain_text
from roses_app.store import StoredEntry

HTML_MEDIA_TYPE = "text/html"
# No script at all on ROSES's pages; inline styles are ours.
CSP = "script-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'"
STYLE = (
    "body{font-family:sans-serif;max-width:50em;margin:1em auto;padding:0 1em;"
    "line-height:1.45;overflow-wrap:anywhere}"
    "img,video,iframe,table{max-width:100%;height:auto}pre{overflow-x:auto;white-space:pre-wrap}"
    ".meta{color:#555;font-size:90%}.subscribe a{display:inline-block;margin:.2em .6em .2em 0;"
    "padding:.3em .7em;border:1px solid #c33;border-radius:.3em;color:#c33;text-decoration:none}"
    "article{border-top:1px solid #ddd;padding:.5em 0}h2{font-size:1.2em;margin:.4em 0}"
    "li{margin:.5em 0}li .meta{display:block}.untitled{color:#555}"
)
# What an item without a title is shown as: a label of the page, not the item's.
UNTITLED = '<em class="untitled" title="This item has no title">(no title)</em>'


def page_head(title: str, alternates: Sequence[tuple[str, str, str]]) -> list[str]:
    """``<head>`` of a ROSES page: charset, viewport, CSP, title, feed autodiscovery.

    ``alternates`` are (media type, title, URL) of the feeds to advertise.
    """
    esc = html.escape
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{esc(title)}</title>",
    ]
    lines += [
        f'<link rel="alternate" type="{esc(kind)}" title="{esc(text)}" href="{esc(url)}">'
        for kind, text, url in alternates
    ]
    lines += [f"<style>{STYLE}</style>", "</head><body>"]
    return lines


def subscribe_links(feed: FeedInfo) -> list[tuple[str, str, str]]:
    """(media type, label, URL) of each format of ``feed``."""
    links = [(RSS_MEDIA_TYPE, "RSS", feed.rss_url), (ATOM_MEDIA_TYPE, "Atom", feed.atom_url)]
    if feed.json_url:
        links.append((JSON_FEED_MEDIA_TYPE, "JSON Feed", feed.json_url))
    return links


def display_date(iso: str) -> str:
    """An RFC 3339 date as people read it, in UTC."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M UTC")


def _article(item: dict[str, Any]) -> list[str]:
    esc = html.escape
    title = esc(item["title"]) if item.get("title") else UNTITLED
    url = item.get("url")
    heading = f'<a href="{esc(url)}">{title}</a>' if url else title
    meta: list[str] = []
    date = item.get("date_published") or item.get("date_modified")
    if date:
        meta.append(f'<time datetime="{esc(date)}">{esc(display_date(date))}</time>')
    meta += [esc(a["name"]) for a in item.get("authors", [])]
    if item.get("tags"):
        meta.append(esc(", ".join(item["tags"])))
    lines = ["<article>", f"<h2>{heading}</h2>"]
    if meta:
        lines.append(f'<p class="meta">{" · ".join(meta)}</p>')
    # content_html is sanitized (nh3) by the item reader: it is inserted as HTML.
    content = item.get("content_html")
    if content:
        lines.append(f'<div class="content">{content}</div>')
    for attachment in item.get("attachments", []):
        lines.append(
            f'<p class="meta">Attachment: <a href="{esc(attachment["url"])}">'
            f"{esc(attachment['mime_type'])}</a></p>"
        )
    lines.append("</article>")
    return lines


def render_feed_page(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """The HTML page of ``feed`` with ``entries`` (newest first, as given)."""
    del updated  # the page shows each item's date
    esc = html.escape
    title = label(feed.title, feed.stream)
    links = subscribe_links(feed)
    lines = page_head(title, links)
    if feed.index_url:
        lines.append(f'<p class="meta"><a href="{esc(feed.index_url)}">All feeds</a></p>')
    lines.append(f"<h1>{esc(title)}</h1>")
    if plain_text(feed.description):
        lines.append(f"<p>{esc(plain_text(feed.description))}</p>")
    anchors = " ".join(
        f'<a href="{esc(url)}" type="{esc(kind)}">{esc(text)}</a>' for kind, text, url in links
    )
    lines.append(f'<p class="subscribe">Subscribe: {anchors}</p>')
    items = json_items(entries)
    if not items:
        lines.append("<p>No item yet.</p>")
    for item in items:
        lines += _article(item)
    lines.append("</body></html>")
    return ("\n".join(lines) + "\n").encode("utf-8")
