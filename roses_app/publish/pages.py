"""Pages listing the published feeds: OPML 2.0 (for feed readers) and the HTML index.

Titles, descriptions and split values are plain text here as in the feeds
(:func:`roses_app.publish.sanitize.plain_text`), and the index escapes all it writes.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from urllib.parse import quote

from lxml import etree

from roses_app.items import iso8601
from roses_app.publish.feedpage import display_date, page_head, subscribe_links
from roses_app.publish.render import (
    OPML_MEDIA_TYPE,
    FeedGroup,
    FeedInfo,
    FeedStats,
)
from roses_app.publish.sanitize import label, plain_text

# -- grouping for OPML and the index ---------------------------------------------------


def _groups(feeds: Iterable[FeedGroup | FeedInfo]) -> list[FeedGroup]:
    """Accept groups, or flat FeedInfos (grouped here by stream, in order)."""
    out: list[FeedGroup] = []
    pending: dict[str, list[FeedInfo]] = {}
    order: list[str | FeedGroup] = []
    for item in feeds:
        if isinstance(item, FeedGroup):
            order.append(item)
        else:
            if item.stream not in pending:
                pending[item.stream] = []
                order.append(item.stream)
            pending[item.stream].append(item)
    for entry in order:
        if isinstance(entry, FeedGroup):
            out.append(entry)
            continue
        members = pending[entry]
        first = members[0]
        split = first.split
        title = first.title.rsplit(" — ", 1)[0] if split else first.title
        out.append(
            FeedGroup(
                stream=entry,
                title=title,
                description=first.description,
                split=split,
                html_url=first.html_url,
                feeds=tuple(members),
            )
        )
    return out


# -- OPML 2.0 --------------------------------------------------------------------------


def render_opml(
    feeds: Iterable[FeedGroup | FeedInfo], *, title: str = "ROSES feeds", fmt: str = "rss"
) -> bytes:
    """OPML 2.0 listing every published feed; split parts nest under their stream.

    ``fmt="json"`` lists the JSON Feed documents instead of the RSS ones (each feed
    once, so that a reader importing the list subscribes to it once).
    """
    opml = etree.Element("opml", version="2.0")
    head = etree.SubElement(opml, "head")
    # no <docs> (optional in OPML 2.0): the W3C validator does not know it
    etree.SubElement(head, "title").text = label(title)
    body = etree.SubElement(opml, "body")

    def outline(parent: etree._Element, feed: FeedInfo) -> None:
        text = label(feed.title, feed.stream)
        attrs = {
            "text": text,
            "title": text,
            "type": "rss",
            "xmlUrl": feed.json_url if fmt == "json" and feed.json_url else feed.rss_url,
            "htmlUrl": feed.html_url,
        }
        if plain_text(feed.description):
            attrs["description"] = plain_text(feed.description)
        etree.SubElement(parent, "outline", **attrs)

    for group in _groups(feeds):
        if not group.split:
            for feed in group.feeds:
                outline(body, feed)
        elif group.feeds:
            text = label(group.title, group.stream)
            # a folder is an outline with only "text": OPML 2.0 asks a "type" of any other
            folder = etree.SubElement(body, "outline", text=text)
            for feed in group.feeds:
                outline(folder, feed)
    return etree.tostring(opml, xml_declaration=True, encoding="utf-8")


# -- HTML index ------------------------------------------------------------------------


def html_anchor(name: str) -> str:
    """The id of a feed's section on the index page."""
    return "feed-" + re.sub(r"[^A-Za-z0-9_.:-]", lambda m: f"_{ord(m.group()):x}_", name)


def part_label(part: str) -> str:
    """A split value as plain text; percent-quoted when nothing of it is text."""
    return plain_text(part) or quote(part, safe="")


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _feed_meta(st: FeedStats | None) -> str:
    """Item count and the newest item's date of a feed, escaped HTML."""
    if st is None:
        return ""
    if st.count == 0 and st.updated is None:  # e.g. a digest before its first window ends
        return ' <span class="meta">no item yet</span>'
    parts = [_plural(st.count, "item")]
    if st.newest is not None:
        iso = iso8601(st.newest)
        parts.append(f'newest <time datetime="{iso}">{html.escape(display_date(iso))}</time>')
    parts.append(f"updated {html.escape(_when(st.updated))}")
    return f' <span class="meta">{", ".join(parts)}</span>'


def _feed_line(feed: FeedInfo, text: str, st: FeedStats | None, split: bool) -> str:
    esc = html.escape
    # A split value's line is an anchor of its own; a stream's is its section's.
    anchor = f' id="{esc(html_anchor(feed.name))}"' if split else ""
    formats = " · ".join(
        f'<a href="{esc(url)}" type="{esc(kind)}">{esc(name)}</a>'
        for kind, name, url in subscribe_links(feed)
    )
    return (
        f'<li{anchor}><a href="{esc(feed.html_url)}">{esc(text)}</a> — {formats}'
        f"{_feed_meta(st)}</li>"
    )


def render_index(
    feeds: Iterable[FeedGroup | FeedInfo],
    stats: Mapping[str, FeedStats] | None = None,
    *,
    title: str = "ROSES feeds",
    opml_url: str = "/feeds.opml",
    json_opml_url: str = "/feeds-json.opml",
) -> bytes:
    """An HTML page listing every published feed with its links; all text is escaped.

    ``stats`` maps a feed's ``name`` to its item count, last update and newest item's
    date.  Each feed links to its page (``/feeds/NAME.html``) and its documents.
    """
    esc = html.escape
    stats = stats or {}
    lines = page_head(title, [(OPML_MEDIA_TYPE, "OPML", opml_url)])
    lines += [
        f"<h1>{esc(title)}</h1>",
        f'<p>Subscribe to all of them at once: <a href="{esc(opml_url)}">OPML</a>'
        f' (or <a href="{esc(json_opml_url)}">OPML of the JSON Feeds</a>).</p>',
    ]
    groups = _groups(feeds)
    if not groups:
        lines.append("<p>No stream is published yet: add <code>publish:</code> to a stream.</p>")
    for group in groups:
        lines.append(f'<section id="{esc(html_anchor(group.stream))}">')
        lines.append(f"<h2>{esc(label(group.title, group.stream))}</h2>")
        if plain_text(group.description):
            lines.append(f"<p>{esc(plain_text(group.description))}</p>")
        lines.append("<ul>")
        if group.split and not group.feeds:
            lines.append("<li>No output yet: a feed appears for each value as it appears.</li>")
        for feed in group.feeds:
            text = part_label(feed.part) if group.split else label(feed.title, feed.stream)
            lines.append(_feed_line(feed, text, stats.get(feed.name), group.split))
        lines.append("</ul></section>")
    lines.append("</body></html>")
    return ("\n".join(lines) + "\n").encode("utf-8")
