"""Feed documents: RSS 2.0, Atom 1.0, OPML 2.0 and the HTML index.

Every renderer is a pure function of its arguments: rendering the same entries twice
gives the same bytes, so the body hash is a usable ETag.  Items are copied from the
stored XML (with all their elements); an item without ``<pubDate>`` gets one from its
timestamp and an item without ``<guid>`` gets the store's identity as a non-permalink
guid, so that guids are stable across renders.
"""

from __future__ import annotations

import html
import logging
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parseaddr, parsedate_to_datetime

from lxml import etree

from roses_app.items import FEED_NAMESPACES, MICROS, iso8601, micros_of, parse_item, rfc822
from roses_app.publish.sanitize import sanitize_item
from roses_app.store import StoredEntry

log = logging.getLogger(__name__)

ATOM_NS = "http://www.w3.org/2005/Atom"
CONTENT_NS = FEED_NAMESPACES["content"]
DC_NS = FEED_NAMESPACES["dc"]
GENERATOR = "ROSES"
GENERATOR_URI = "https://github.com/roses"

# Stable namespace for the urn:uuid identifiers of feeds and entries.
ROSES_UUID_NS = uuid.UUID("6f0d9c2e-8a51-5b7e-9e43-2b1f3a9c7d10")

RSS_MEDIA_TYPE = "application/rss+xml"
ATOM_MEDIA_TYPE = "application/atom+xml"
OPML_MEDIA_TYPE = "text/x-opml"


@dataclass(frozen=True)
class FeedInfo:
    """One published feed document: a stream, or one part of a split stream.

    ``name`` is the catalog key, ``STREAM`` or ``STREAM/VALUE`` (unquoted).
    """

    name: str
    stream: str
    part: str
    title: str
    description: str
    keep: int
    rss_url: str
    atom_url: str
    html_url: str
    split: bool = False


@dataclass(frozen=True)
class FeedGroup:
    """A published stream with its feeds: one, or one per split value present."""

    stream: str
    title: str
    description: str
    split: bool
    html_url: str
    feeds: tuple[FeedInfo, ...]


@dataclass(frozen=True)
class FeedStats:
    count: int
    updated: float | None


# -- identifiers and dates -------------------------------------------------------------


def feed_id(feed: FeedInfo) -> str:
    """A stable Atom id for a feed (it does not depend on the host serving it)."""
    return uuid.uuid5(ROSES_UUID_NS, f"feed:{feed.stream}\0{feed.part}").urn


def entry_id(guid: str) -> str:
    """A stable Atom id for an entry, derived from its guid."""
    return uuid.uuid5(ROSES_UUID_NS, f"entry:{guid}").urn


def _iso(micros: int) -> str:
    return iso8601(micros)


def _iso_seconds(seconds: float) -> str:
    return iso8601(int(seconds * MICROS))


def _parse_date(text: str | None) -> int | None:
    """RFC 822 (pubDate) or ISO 8601 (dc:date) to microseconds, None if unreadable."""
    if not text or not text.strip():
        return None
    text = text.strip()
    try:
        return micros_of(parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError, OverflowError):
        pass
    try:
        return micros_of(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        return None


# -- item helpers ----------------------------------------------------------------------


def _text(el: etree._Element | None) -> str:
    if el is None:
        return ""
    return "".join(el.itertext()).strip()


def _inner_markup(el: etree._Element | None) -> str:
    """The content of an element as an HTML string (escaped text or child elements)."""
    if el is None:
        return ""
    parts = [el.text or ""]
    for child in el:
        parts.append(etree.tostring(child, encoding="unicode", with_tail=True))
    return "".join(parts)


def _item_element(entry: StoredEntry) -> etree._Element | None:
    """The stored item as an ``<item>`` element, with pubDate and guid filled in, and
    sanitized (HTML and URLs: see :mod:`roses_app.publish.sanitize`)."""
    try:
        el = parse_item(entry.item)
    except etree.XMLSyntaxError as exc:
        log.warning("skipping a malformed stored item of %r: %s", entry.stream, exc)
        return None
    if el.tag != "item":
        wrapper = etree.Element("item")
        wrapper.append(el)
        el = wrapper
    if el.find("pubDate") is None:
        etree.SubElement(el, "pubDate").text = rfc822(entry.ts)
    if el.find("guid") is None:
        guid = etree.SubElement(el, "guid", isPermaLink="false")
        guid.text = entry.guid
    return sanitize_item(el)


def _entry_times(el: etree._Element, entry: StoredEntry) -> tuple[int | None, int]:
    """(published, updated) in microseconds: pubDate (or dc:date), else ts."""
    published = _parse_date(el.findtext("pubDate"))
    if published is None:
        published = _parse_date(el.findtext(f"{{{DC_NS}}}date"))
    return published, published if published is not None else entry.ts


# -- RSS 2.0 ---------------------------------------------------------------------------


def _last_build(entries: Sequence[StoredEntry], updated: float | None) -> float | None:
    if updated is not None:
        return updated
    return max((e.updated_at for e in entries), default=None)


def render_rss(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """An RSS 2.0 document of ``entries`` (newest first, as given)."""
    nsmap: dict[str | None, str] = {k: v for k, v in FEED_NAMESPACES.items()}
    rss = etree.Element("rss", nsmap=nsmap, version="2.0")
    channel = etree.SubElement(rss, "channel")
    etree.SubElement(channel, "title").text = feed.title
    etree.SubElement(channel, "link").text = feed.html_url
    etree.SubElement(channel, "description").text = feed.description or feed.title
    last = _last_build(entries, updated)
    if last is not None:
        etree.SubElement(channel, "lastBuildDate").text = rfc822(int(last * MICROS))
    etree.SubElement(channel, "generator").text = GENERATOR
    etree.SubElement(channel, "docs").text = "https://www.rssboard.org/rss-specification"
    etree.SubElement(
        channel,
        f"{{{ATOM_NS}}}link",
        href=feed.rss_url,
        rel="self",
        type=RSS_MEDIA_TYPE,
    )
    for entry in entries:
        el = _item_element(entry)
        if el is not None:
            channel.append(el)
    etree.cleanup_namespaces(rss, top_nsmap=nsmap)
    return etree.tostring(rss, xml_declaration=True, encoding="utf-8")


# -- Atom 1.0 --------------------------------------------------------------------------


def _a(parent: etree._Element, tag: str, text: str | None = None, **attrs: str) -> etree._Element:
    el = etree.SubElement(parent, f"{{{ATOM_NS}}}{tag}", **attrs)
    if text is not None:
        el.text = text
    return el


def _person(parent: etree._Element, raw: str) -> None:
    """RSS ``author`` ("mail@host (Name)" or a name) as an Atom person."""
    raw = raw.strip()
    if not raw:
        return
    name, email = raw, ""
    match = re.fullmatch(r"\s*(\S+@\S+)\s*\((.+)\)\s*", raw)
    if match:
        email, name = match.group(1), match.group(2).strip()
    else:
        parsed_name, parsed_email = parseaddr(raw)
        if parsed_email and "@" in parsed_email:
            email, name = parsed_email, parsed_name or parsed_email
    author = _a(parent, "author")
    _a(author, "name", name)
    if email:
        _a(author, "email", email)


def _atom_entry(feed_el: etree._Element, el: etree._Element, entry: StoredEntry) -> None:
    published, updated = _entry_times(el, entry)
    out = _a(feed_el, "entry")
    _a(out, "id", entry_id(entry.guid))
    link = el.findtext("link")
    guid_el = el.find("guid")
    guid_text = "" if guid_el is None else (guid_el.text or "").strip()
    if (
        (not link or not link.strip())
        and guid_el is not None
        and guid_el.get("isPermaLink", "true") != "false"
        and re.match(r"https?://", guid_text)
    ):
        link = guid_text
    title = _text(el.find("title")) or (link or "").strip() or "(untitled)"
    _a(out, "title", title, type="text")
    _a(out, "updated", _iso(updated))
    if published is not None:
        _a(out, "published", _iso(published))
    if link and link.strip():
        _a(out, "link", rel="alternate", type="text/html", href=link.strip())
    for enclosure in el.findall("enclosure"):
        url = enclosure.get("url")
        if url:
            attrs = {"rel": "enclosure", "href": url}
            if enclosure.get("type"):
                attrs["type"] = enclosure.get("type", "")
            if (enclosure.get("length") or "").isdigit():
                attrs["length"] = enclosure.get("length", "")
            _a(out, "link", **attrs)
    author = el.findtext("author") or el.findtext(f"{{{DC_NS}}}creator") or ""
    _person(out, author)
    for category in el.findall("category"):
        term = _text(category)
        if term:
            attrs = {"term": term}
            domain = category.get("domain") or ""
            if ":" in domain:
                attrs["scheme"] = domain
            _a(out, "category", **attrs)
    description = el.find("description")
    if description is not None and _inner_markup(description).strip():
        _a(out, "summary", _inner_markup(description), type="html")
    content = el.find(f"{{{CONTENT_NS}}}encoded")
    if content is not None and _inner_markup(content).strip():
        _a(out, "content", _inner_markup(content), type="html")


def render_atom(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """An Atom 1.0 document of ``entries`` (newest first, as given)."""
    root = etree.Element(f"{{{ATOM_NS}}}feed", nsmap={None: ATOM_NS})
    _a(root, "id", feed_id(feed))
    _a(root, "title", feed.title, type="text")
    if feed.description:
        _a(root, "subtitle", feed.description, type="text")
    last = _last_build(entries, updated)
    _a(root, "updated", _iso_seconds(last) if last is not None else _iso(0))
    _a(root, "link", rel="self", type=ATOM_MEDIA_TYPE, href=feed.atom_url)
    _a(root, "link", rel="alternate", type="text/html", href=feed.html_url)
    author = _a(root, "author")
    _a(author, "name", GENERATOR)
    _a(root, "generator", GENERATOR, uri=GENERATOR_URI)
    for entry in entries:
        el = _item_element(entry)
        if el is not None:
            _atom_entry(root, el, entry)
    return etree.tostring(root, xml_declaration=True, encoding="utf-8")


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


def render_opml(feeds: Iterable[FeedGroup | FeedInfo], *, title: str = "ROSES feeds") -> bytes:
    """OPML 2.0 listing every published feed; split parts nest under their stream."""
    opml = etree.Element("opml", version="2.0")
    head = etree.SubElement(opml, "head")
    etree.SubElement(head, "title").text = title
    etree.SubElement(head, "docs").text = "http://opml.org/spec2.opml"
    body = etree.SubElement(opml, "body")

    def outline(parent: etree._Element, feed: FeedInfo) -> None:
        attrs = {
            "text": feed.title,
            "title": feed.title,
            "type": "rss",
            "xmlUrl": feed.rss_url,
            "htmlUrl": feed.html_url,
        }
        if feed.description:
            attrs["description"] = feed.description
        etree.SubElement(parent, "outline", **attrs)

    for group in _groups(feeds):
        if not group.split:
            for feed in group.feeds:
                outline(body, feed)
        elif group.feeds:
            folder = etree.SubElement(body, "outline", text=group.title, title=group.title)
            for feed in group.feeds:
                outline(folder, feed)
    return etree.tostring(opml, xml_declaration=True, encoding="utf-8")


# -- HTML index ------------------------------------------------------------------------


def html_anchor(name: str) -> str:
    """The id of a feed's section on the index page."""
    return "feed-" + re.sub(r"[^A-Za-z0-9_.:-]", lambda m: f"_{ord(m.group()):x}_", name)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_index(
    feeds: Iterable[FeedGroup | FeedInfo],
    stats: Mapping[str, FeedStats] | None = None,
    *,
    title: str = "ROSES feeds",
    opml_url: str = "/feeds.opml",
) -> bytes:
    """An HTML page listing every published feed with its links; all text is escaped.

    ``stats`` maps a feed's ``name`` to its item count and last update.
    """
    esc = html.escape
    stats = stats or {}
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title>",
        f'<link rel="alternate" type="{OPML_MEDIA_TYPE}" title="OPML" href="{esc(opml_url)}">',
        "<style>body{font-family:sans-serif;max-width:50em;margin:2em auto;padding:0 1em}"
        "li{margin:.3em 0}.meta{color:#666;font-size:90%}</style>",
        "</head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p>Subscribe to all of them at once: <a href="{esc(opml_url)}">OPML</a>.</p>',
    ]

    def feed_line(feed: FeedInfo, label: str) -> str:
        st = stats.get(feed.name)
        meta = ""
        if st is not None:
            meta = f' <span class="meta">{st.count} items, updated {esc(_when(st.updated))}</span>'
        return (
            f'<li id="{esc(html_anchor(feed.name))}">{esc(label)} — '
            f'<a href="{esc(feed.rss_url)}" type="{RSS_MEDIA_TYPE}">RSS</a> · '
            f'<a href="{esc(feed.atom_url)}" type="{ATOM_MEDIA_TYPE}">Atom</a>{meta}</li>'
        )

    groups = _groups(feeds)
    if not groups:
        lines.append("<p>No stream is published yet: add <code>publish:</code> to a stream.</p>")
    for group in groups:
        lines.append(f'<section id="{esc(html_anchor(group.stream))}">')
        lines.append(f"<h2>{esc(group.title)}</h2>")
        if group.description:
            lines.append(f"<p>{esc(group.description)}</p>")
        lines.append("<ul>")
        if group.split and not group.feeds:
            lines.append("<li>No output yet: a feed appears for each value as it appears.</li>")
        for feed in group.feeds:
            lines.append(feed_line(feed, feed.part if group.split else feed.title))
        lines.append("</ul></section>")
    lines.append("</body></html>")
    return ("\n".join(lines) + "\n").encode("utf-8")
