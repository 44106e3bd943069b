"""feedparser results -> canonical ``<item>`` elements.

:func:`parse_feed` runs feedparser on bytes already fetched (feedparser never
fetches or opens anything itself: the body is handed over as a stream, because a
plain ``bytes`` argument that happens to name a file would be read from disk).
feedparser's SAX parser is used with external general entities off, and its
DOCTYPE handling keeps only the internal entity declarations it knows to be
safe, so no XML parsing here resolves an external entity.

:func:`xmlize_entry` writes one entry in the RSS 2.0 vocabulary, children in
this order::

    title, link, description, content:encoded, pubDate, guid, author,
    category*, enclosure*, source,
    comments, dc:creator*, dc:contributor*, dc:rights, atom:updated,
    media:content*, media:thumbnail*, itunes:duration

As RSS 2.0 asks, ``author`` is an e-mail address (``a@b.org (Name)``) and names are
``dc:creator``.  ``source`` is the feed an item first came from: its own ``<source>``
when it has one, else the feed read, with the feed's URL (its ``rel="self"`` link, else
the URL fetched), not its home page.  ``link`` is the item's own (not one nested in an
extension element: :mod:`.entrylinks`).  What a feed gives in a form no feed may carry
(an unreadable date, a link that is no web URL (:mod:`roses_app.urls`), an address that
is no address) is dropped from that field and logged with the feed's URL, never guessed.

Titles are plain text as the feed declares them: an RSS title is text even when it
looks like markup (``<p>Title</p>``), an Atom ``type="html"`` title becomes the text
it shows; ``dc:rights`` is always the text it shows.

Only the namespaces an item uses are declared on it.  Text stays text: an HTML
description is escaped character data, never parsed markup.  Characters that
XML 1.0 forbids are dropped.  The output depends only on the entry and the feed
(never on the fetch time), so the same entry gives the same bytes and the
spool's content-hash deduplication works.
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import feedparser
from lxml import etree

from roses_app.connectors.entrycut import cut_entries
from roses_app.connectors.entryfields import (
    clean_text,
    dict_list,
    enclosure_length,
    enclosure_type,
    feed_link,
    first_content,
    get_field,
    is_web_url,
    micros_of_struct,
    plain_field,
    published_micros,
    rss_author,
    source_of,
    text_field,
    web_uri,
)
from roses_app.connectors.entrylinks import entry_link, own_links
from roses_app.errors import FeedParseError
from roses_app.items import FEED_NAMESPACES, iso8601, rfc822
from roses_app.urls import taxonomy

log = logging.getLogger(__name__)

CONTENT_NS = FEED_NAMESPACES["content"]
DC_NS = FEED_NAMESPACES["dc"]
ATOM_NS = FEED_NAMESPACES["atom"]
MEDIA_NS = FEED_NAMESPACES["media"]
ITUNES_NS = FEED_NAMESPACES["itunes"]
_PREFIX_OF = {uri: prefix for prefix, uri in FEED_NAMESPACES.items()}

_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]*$")

# feedparser flags these as "bozo" although the document parsed fine.
_BENIGN_BOZO = (
    feedparser.CharacterEncodingOverride,
    feedparser.NonXMLContentType,
)

_MEDIA_CONTENT_ATTRS = (
    "url",
    "type",
    "medium",
    "filesize",
    "width",
    "height",
    "duration",
    "bitrate",
    "framerate",
    "samplingrate",
    "channels",
    "expression",
    "isdefault",
    "lang",
)
# feedparser lower-cases attribute names; write them back in MRSS spelling.
_MRSS_SPELLING = {"filesize": "fileSize", "isdefault": "isDefault"}
_MEDIA_THUMBNAIL_ATTRS = ("url", "width", "height", "time")


@dataclass(frozen=True)
class ParsedFeed:
    """A parsed feed document and its entries as canonical items."""

    title: str
    link: str
    entries: list[tuple[str, int | None]]
    version: str = ""  # feedparser's name for the format, e.g. "rss20", "atom10"
    bozo: bool = False  # feedparser had to recover from an error
    bozo_message: str = ""
    skipped: int = 0  # entries that could not be written (logged); should stay 0
    left_out: int = 0  # entries past max_items, not taken (logged)
    dropped: int = 0  # fields dropped as invalid (logged): bad dates, URIs, addresses
    hub: str | None = None  # a WebSub hub the feed names (<atom:link rel="hub">)
    self_url: str | None = None  # its own URL (<atom:link rel="self">): the WebSub topic


# -- parsing -------------------------------------------------------------------------

# Entries taken from one document, in its order (a feed's newest come first), unless
# settings.fetch.max_items says otherwise: what parsing, xml-izing, the spool and the
# daemon hold of one poll is bounded by this, not by the document (a 20 MB feed of
# 100,000 small items took the daemon to 650 MB before).
MAX_ENTRIES = 10_000
# Entries feedparser reads at once: a larger document is parsed in parts of this many
# (entrycut.py), so that feedparser's dictionaries and lxml's tree of one part are what
# a parse worker holds beside the document and the items, whatever max_items is.
PARSE_CHUNK = 1_000


def parse_feed(
    body: bytes | BinaryIO,
    url: str,
    headers: Mapping[str, str] | None = None,
    max_items: int | None = None,
) -> ParsedFeed:
    """Parse a fetched document (or a file holding one), its first ``max_items`` entries
    (default :data:`MAX_ENTRIES`); raise :class:`FeedParseError` when it is not a feed."""
    limit = MAX_ENTRIES if max_items is None else max_items
    cut = cut_entries(body, limit, PARSE_CHUNK)
    if not cut.body.strip():
        raise FeedParseError(f"{url}: empty document")
    response_headers = {k.lower(): v for k, v in (headers or {}).items()}
    if url.startswith(("http:", "https:")):
        response_headers.setdefault("content-location", url)
    parts = cut.parts()
    part = next(parts)
    result = _feedparse(part, url, response_headers)
    feed = result.get("feed") or {}
    version, bozo_message = _check_feed(result, url)
    bozo = bool(result.get("bozo"))
    problems: list[str] = []
    entries: list[tuple[str, int | None]] = []
    found = skipped = 0
    hub, self_url = feed_link(feed, "hub"), feed_link(feed, "self")
    while True:
        raw_entries = list(result.get("entries") or [])
        found += len(raw_entries)
        del raw_entries[max(0, limit - len(entries) - skipped) :]
        taken, failed = _xmlize_all(raw_entries, feed, part, url, version, problems)
        entries += taken
        skipped += failed
        part = next(parts, b"")
        if not part:
            break
        result = _feedparse(part, url, response_headers)  # a later part of the document
        bozo = bozo or bool(result.get("bozo"))
        links = result.get("feed") or {}  # what the channel says after its entries
        hub, self_url = hub or feed_link(links, "hub"), self_url or feed_link(links, "self")
    for problem in problems:
        log.warning("%s: %s", url, problem)
    return ParsedFeed(
        title=clean_text(feed.get("title", "")).strip(),
        link=clean_text(feed.get("link", "")).strip(),
        entries=entries,
        version=version,
        bozo=bozo,
        bozo_message=bozo_message,
        skipped=skipped,
        left_out=max(0, found - limit, (cut.entries or 0) - limit),
        dropped=len(problems),
        hub=hub,
        self_url=self_url,
    )


def _check_feed(result: Any, url: str) -> tuple[str, str]:
    """feedparser's name for the format, and its error when it had to recover from one;
    raise :class:`FeedParseError` when the document is no feed."""
    feed = result.get("feed") or {}
    version = clean_text(result.get("version") or "")
    bozo_message = ""
    problem = result.get("bozo_exception") if result.get("bozo") else None
    if problem is not None:
        bozo_message = clean_text(f"{type(problem).__name__}: {problem}")
    title = clean_text(feed.get("title", "")).strip()
    serious = result.get("bozo") and not isinstance(problem, _BENIGN_BOZO)
    if not result.get("entries") and (not version or (serious and not title)):
        why = bozo_message or "no feed elements found"
        raise FeedParseError(f"{url}: not an RSS/Atom feed ({why})")
    return version, bozo_message


def _feedparse(body: bytes, url: str, headers: Mapping[str, str]) -> Any:
    try:
        return feedparser.parse(
            io.BytesIO(body),
            response_headers=headers,
            resolve_relative_uris=True,
            sanitize_html=True,
        )
    except Exception as exc:  # feedparser has crash bugs on hostile input
        raise FeedParseError(f"{url}: feedparser failed: {type(exc).__name__}: {exc}") from exc


def _xmlize_all(
    raw_entries: list[Any],
    feed: Mapping[str, Any],
    body: bytes,
    url: str,
    version: str,
    problems: list[str],
) -> tuple[list[tuple[str, int | None]], int]:
    """Every entry as an item (and how many could not be written: logged)."""
    entries: list[tuple[str, int | None]] = []
    skipped = 0
    links = own_links(body) if raw_entries else None
    if links is not None and len(links) != len(raw_entries):
        links = None  # lxml and feedparser disagree on the entries: no pairing
    for n, entry in enumerate(raw_entries):
        own = links[n] if links is not None else None
        try:
            entries.append(
                xmlize_entry(entry, feed, url=url, problems=problems, version=version, own=own)
            )
        except Exception as exc:  # one odd entry must not lose the others
            skipped += 1
            log.warning("%s: skipped an entry that cannot be written as an item: %s", url, exc)
    return entries, skipped


# -- writing -------------------------------------------------------------------------


class _ItemBuilder:
    """Collects children first so that only the namespaces used get declared."""

    def __init__(self) -> None:
        self.children: list[tuple[str, str | None, list[tuple[str, str]], str]] = []
        self.used: set[str] = set()

    def add(
        self,
        tag: str,
        text: object = None,
        attrs: list[tuple[str, object]] | None = None,
        ns: str | None = None,
    ) -> None:
        clean_attrs = [(k, clean_text(v)) for k, v in (attrs or []) if v is not None]
        self.children.append((tag, ns, clean_attrs, clean_text(text)))
        if ns is not None:
            self.used.add(ns)

    def build(self) -> etree._Element:
        nsmap = {_PREFIX_OF[ns]: ns for ns in sorted(self.used, key=lambda u: _PREFIX_OF[u])}
        root = etree.Element("item", nsmap=nsmap)
        for tag, ns, attrs, text in self.children:
            qname = f"{{{ns}}}{tag}" if ns else tag
            child = etree.SubElement(root, qname)
            for key, value in attrs:
                child.set(key, value)
            if text:
                child.text = text
        return root


def xmlize_entry(
    entry: Mapping[str, Any],
    feed: Mapping[str, Any],
    *,
    url: str = "",
    problems: list[str] | None = None,
    version: str = "",
    own: Sequence[str] | None = None,
) -> tuple[str, int | None]:
    """One feedparser entry as a serialized canonical ``<item>`` and its published µs.

    ``url`` is where the feed was fetched; each field dropped as invalid is described
    in ``problems`` (when given).  ``version`` is feedparser's name of the format (an
    Atom title's type is declared, an RSS one's is not), ``own`` the links the entry
    names itself (:func:`.entrylinks.own_links`; None: unknown)."""
    b = _ItemBuilder()
    dropped = problems if problems is not None else []
    feed_url = url

    title = plain_field(entry, "title", markup_is_text=not version.startswith("atom"))
    link = entry_link(entry, own)
    guid = text_field(entry, "id")
    if link and link == guid and get_field(entry, "guidislink") and not is_web_url(link):
        link = ""  # feedparser copied a non-URL id (tag:, urn:) into the link
    if link and not web_uri(link, feed_url):
        dropped.append(f"link {link!r} of {guid or title!r} is not a web URL: dropped")
    link = web_uri(link, feed_url)
    summary = clean_text(get_field(entry, "summary") or "")
    content = first_content(entry)
    description = summary if summary.strip() else content
    if title:
        b.add("title", title)
    if link:
        b.add("link", link)
    if description.strip():
        b.add("description", description)
    if content and content != description:
        b.add("encoded", content, ns=CONTENT_NS)

    published = published_micros(entry)
    if published is not None:
        b.add("pubDate", rfc822(published))
    elif text_field(entry, "published") or text_field(entry, "updated"):
        raw = text_field(entry, "published") or text_field(entry, "updated")
        dropped.append(f"date {raw!r} of {guid or link or title!r} is unreadable: dropped")

    if guid:
        b.add("guid", guid, [("isPermaLink", "true" if guid == link else "false")])
    elif link:
        b.add("guid", link, [("isPermaLink", "true")])

    author = rss_author(entry, dropped)
    if author:
        b.add("author", author)

    _add_categories(b, entry, guid or link or title, dropped)
    _add_enclosures(b, entry, feed_url, guid or link or title, dropped)
    source_title, source_url = source_of(entry, feed, feed_url)
    if source_title or source_url:
        b.add("source", source_title, [("url", source_url or None)])

    _add_extensions(b, entry, published, feed_url, dropped)
    element = b.build()
    return etree.tostring(element, encoding="unicode"), published


def _add_categories(
    b: _ItemBuilder, entry: Mapping[str, Any], name: str, dropped: list[str]
) -> None:
    """Its tags as categories, each once; a domain must be a taxonomy's (roses_app.urls)."""
    seen: set[tuple[str, str]] = set()
    for tag in dict_list(get_field(entry, "tags")):
        term = clean_text(tag.get("term") or tag.get("label") or "").strip()
        scheme = clean_text(tag.get("scheme") or "").strip()
        if scheme and not taxonomy(scheme):
            dropped.append(f"category domain {scheme!r} of {name!r}: dropped")
            scheme = ""
        if term and (term, scheme) not in seen:
            seen.add((term, scheme))
            b.add("category", term, [("domain", scheme or None)])


def _add_enclosures(
    b: _ItemBuilder, entry: Mapping[str, Any], base: str, name: str, dropped: list[str]
) -> None:
    """Its enclosures with a web URL, each URL once."""
    seen: set[str] = set()
    for enc in dict_list(get_field(entry, "enclosures")):
        url = web_uri(clean_text(enc.get("href") or enc.get("url") or "").strip(), base)
        if not url:
            dropped.append(f"an enclosure of {name!r} has no usable URL: dropped")
            continue
        if url in seen:
            continue
        seen.add(url)
        kind, length = enclosure_type(enc.get("type"), url), enclosure_length(enc.get("length"))
        b.add("enclosure", None, [("url", url), ("type", kind), ("length", length)])


def _person_names(people: Any) -> list[str]:
    """The distinct, cleaned names of a feedparser list of people, in order."""
    names: list[str] = []
    for person in dict_list(people):
        name = clean_text(person.get("name") or "").strip()
        if name and name not in names:
            names.append(name)
    return names


def _add_extensions(
    b: _ItemBuilder, entry: Mapping[str, Any], published: int | None, base: str, dropped: list[str]
) -> None:
    comments = text_field(entry, "comments")
    if comments and not web_uri(comments, base):
        dropped.append(f"comments page {comments!r} is not a web URL: dropped")
    elif comments:
        b.add("comments", web_uri(comments, base))

    for key, tag in (("authors", "creator"), ("contributors", "contributor")):
        for name in _person_names(get_field(entry, key)):
            b.add(tag, name, ns=DC_NS)

    rights = plain_field(entry, "rights", markup_is_text=False)
    if rights:
        b.add("rights", rights, ns=DC_NS)

    updated = micros_of_struct(get_field(entry, "updated_parsed"))
    if updated is not None and updated != published:
        b.add("updated", iso8601(updated), ns=ATOM_NS)

    for media in dict_list(get_field(entry, "media_content")):
        attrs = _media_attrs(media, _MEDIA_CONTENT_ATTRS, base)
        if attrs:
            b.add("content", None, attrs, ns=MEDIA_NS)
    for thumb in dict_list(get_field(entry, "media_thumbnail")):
        attrs = _media_attrs(thumb, _MEDIA_THUMBNAIL_ATTRS, base)
        if attrs:
            b.add("thumbnail", None, attrs, ns=MEDIA_NS)

    duration = text_field(entry, "itunes_duration")
    if duration:
        b.add("duration", duration, ns=ITUNES_NS)


def _media_attrs(
    media: Mapping[str, Any], names: tuple[str, ...], base: str
) -> list[tuple[str, object]]:
    """Media RSS attributes; none when the medium has no web URL (it is not kept)."""
    lowered: dict[str, Any] = {}
    for key, value in media.items():
        if isinstance(key, str) and isinstance(value, str):
            lowered.setdefault(key.lower(), value)
    lowered["url"] = web_uri(clean_text(lowered.get("url", "")).strip(), base)
    if not lowered["url"]:
        return []
    attrs: list[tuple[str, object]] = []
    for name in names:
        value = clean_text(lowered.get(name, "")).strip()
        if value and _XML_NAME.match(name):
            attrs.append((_MRSS_SPELLING.get(name, name), value))
    return attrs
