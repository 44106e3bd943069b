"""Feed documents: RSS 2.0 and Atom 1.0 (OPML and the HTML index: :mod:`.pages`).

Every renderer is a pure function of its arguments: rendering the same entries twice
gives the same bytes, so the body hash is a usable ETag.  Items are copied from the
stored XML (with all their elements); an item without ``<pubDate>`` gets one from its
timestamp and an item without ``<guid>`` gets the store's identity as a non-permalink
guid, so that guids are stable across renders.  Every title, name and label is plain
text (:mod:`roses_app.publish.sanitize`), in RSS as in Atom.  An item with
no title gets none in RSS (as in JSON Feed): only Atom, which requires one, derives it.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from lxml import etree

from roses_app.items import FEED_NAMESPACES, MICROS, iso8601, rfc822
from roses_app.publish.entries import (
    ATOM_NS,
    distinct_updated,
    element_text,
    entry_times,
    inner_markup,
    item_element,
)
from roses_app.publish.itemfields import (
    as_uri,
    parse_date,
    people,
    rss_known_elements,
    rss_one_enclosure,
    rss_people,
    rss_without_itunes,
)
from roses_app.publish.sanitize import label, plain_text
from roses_app.store import StoredEntry

log = logging.getLogger(__name__)

CONTENT_NS = FEED_NAMESPACES["content"]
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
    html_url: str  # the feed's own HTML page (/feeds/NAME.html)
    split: bool = False
    json_url: str = ""  # its JSON Feed 1.1 document
    index_url: str = ""  # the index of every feed
    # WebSub hubs the documents advertise (rel="hub"), ROSES's own first
    hubs: tuple[str, ...] = ()


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
    newest: int | None = None  # the date of the newest item (microseconds), None if empty


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


_parse_date = parse_date


# -- RSS 2.0 ---------------------------------------------------------------------------


def _last_build(entries: Sequence[StoredEntry], updated: float | None) -> float | None:
    if updated is not None:
        return updated
    return max((e.updated_at for e in entries), default=None)


def _rss_item(el: etree._Element) -> etree._Element:
    """An item as RSS 2.0 has it: authors, one enclosure, no iTunes, a title or a
    description (see :mod:`roses_app.publish.itemfields`)."""
    rss_people(el)
    rss_without_itunes(el)
    rss_one_enclosure(el)
    rss_known_elements(el)
    title = el.find("title")
    if title is not None and not (title.text or "").strip():
        el.remove(title)
        title = None
    if title is None and el.find("description") is None:
        # RSS 2.0 asks for a title or a description: an empty description claims no
        # text the item does not have, where a title made of its link would.
        etree.SubElement(el, "description")
    return el


def render_rss(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """An RSS 2.0 document of ``entries`` (newest first, as given)."""
    nsmap: dict[str | None, str] = {k: v for k, v in FEED_NAMESPACES.items()}
    rss = etree.Element("rss", nsmap=nsmap, version="2.0")
    channel = etree.SubElement(rss, "channel")
    title = label(feed.title, feed.stream)
    etree.SubElement(channel, "title").text = title
    etree.SubElement(channel, "link").text = feed.html_url
    etree.SubElement(channel, "description").text = plain_text(feed.description) or title
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
    for hub in feed.hubs:
        etree.SubElement(channel, f"{{{ATOM_NS}}}link", href=hub, rel="hub")
    for entry in entries:
        el = item_element(entry)
        if el is not None:
            channel.append(_rss_item(el))
    etree.cleanup_namespaces(rss, top_nsmap=nsmap)
    return etree.tostring(rss, xml_declaration=True, encoding="utf-8")


# -- Atom 1.0 --------------------------------------------------------------------------


def _a(parent: etree._Element, tag: str, text: str | None = None, **attrs: str) -> etree._Element:
    el = etree.SubElement(parent, f"{{{ATOM_NS}}}{tag}", **attrs)
    if text is not None:
        el.text = text
    return el


def _item_link(el: etree._Element) -> str:
    """The item's web page: ``<link>``, else a permalink ``<guid>`` (as in Atom)."""
    link = (el.findtext("link") or "").strip()
    if link:
        return link
    guid = el.find("guid")
    text = "" if guid is None else (guid.text or "").strip()
    if guid is not None and guid.get("isPermaLink", "true") != "false":
        uri = as_uri(text)
        if uri is not None and re.match(r"https?://", uri):
            return uri
    return ""


def _entry_title(el: etree._Element, link: str) -> str:
    """Atom's title: the item's own.  RFC 4287 requires one, and the validator warns
    about an empty one, so only here an untitled item gets its link, else a label."""
    return element_text(el.find("title")) or link or "(untitled)"


def _atom_people_and_categories(out: etree._Element, el: etree._Element) -> None:
    for person in people(el):
        author = _a(out, "author")
        _a(author, "name", person.name or person.email)
        if person.email:
            _a(author, "email", person.email)
    for category in el.findall("category"):
        term = element_text(category)
        if term:
            attrs = {"term": term}
            # the domain is a name or a URI (roses_app.urls.taxonomy): only a URI is a scheme
            scheme = as_uri(category.get("domain"))
            if scheme is not None:
                attrs["scheme"] = scheme
            _a(out, "category", **attrs)


def _atom_text(out: etree._Element, el: etree._Element, title: str, link: str) -> None:
    """Summary and content; RFC 4287 wants content when there is no alternate link,
    and the validator some text in every entry: the title when there is nothing else."""
    description = inner_markup(el.find("description")).strip()
    content = inner_markup(el.find(f"{{{CONTENT_NS}}}encoded")).strip()
    if content:
        if description:
            _a(out, "summary", description, type="html")
        _a(out, "content", content, type="html")
    elif not link:
        _a(out, "content", description or title, type="html" if description else "text")
    else:
        _a(out, "summary", description or title, type="html" if description else "text")


def _title_attr(el: etree._Element) -> dict[str, str]:
    title = plain_text(el.get("title") or "")
    return {"title": title} if title else {}


def _atom_entry(
    feed_el: etree._Element,
    el: etree._Element,
    entry: StoredEntry,
    published: int | None,
    updated: int,
) -> None:
    out = _a(feed_el, "entry")
    _a(out, "id", entry_id(entry.guid))
    link = _item_link(el)
    title = _entry_title(el, link)
    _a(out, "title", title, type="text")
    _a(out, "updated", _iso(updated))
    if published is not None:
        _a(out, "published", _iso(published))
    if link:
        _a(out, "link", rel="alternate", type="text/html", href=link)
    for related in el.findall(f"{{{ATOM_NS}}}link[@rel='related']"):
        href = as_uri(related.get("href"))
        if href is not None:
            _a(out, "link", rel="related", href=href, **_title_attr(related))
    for enclosure in el.findall("enclosure"):
        url = enclosure.get("url")
        if url:
            attrs = {"rel": "enclosure", "href": url}
            if enclosure.get("type"):
                attrs["type"] = enclosure.get("type", "")
            if (enclosure.get("length") or "").isdigit():
                attrs["length"] = enclosure.get("length", "")
            _a(out, "link", **attrs)
    _atom_people_and_categories(out, el)
    _atom_text(out, el, title, link)


def render_atom(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """An Atom 1.0 document of ``entries`` (newest first, as given)."""
    root = etree.Element(f"{{{ATOM_NS}}}feed", nsmap={None: ATOM_NS})
    _a(root, "id", feed_id(feed))
    _a(root, "title", label(feed.title, feed.stream), type="text")
    if plain_text(feed.description):
        _a(root, "subtitle", plain_text(feed.description), type="text")
    last = _last_build(entries, updated)
    # an empty feed was last changed when this document was made
    _a(root, "updated", _iso_seconds(last if last is not None else time.time()))
    _a(root, "link", rel="self", type=ATOM_MEDIA_TYPE, href=feed.atom_url)
    for hub in feed.hubs:
        _a(root, "link", rel="hub", href=hub)
    _a(root, "link", rel="alternate", type="text/html", href=feed.html_url)
    author = _a(root, "author")
    _a(author, "name", GENERATOR)
    _a(root, "generator", GENERATOR, uri=GENERATOR_URI)
    items = [(el, entry) for entry in entries if (el := item_element(entry)) is not None]
    times = [entry_times(el, entry) for el, entry in items]
    updated_times = distinct_updated(times)
    for (el, entry), (published, _), updated_at in zip(items, times, updated_times, strict=True):
        _atom_entry(root, el, entry, published, updated_at)
    return etree.tostring(root, xml_declaration=True, encoding="utf-8")
