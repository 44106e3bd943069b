"""JSON Feed 1.1 documents (https://www.jsonfeed.org/version/1.1/).

The items are those of the RSS and Atom documents, read the same way
(:func:`roses_app.publish.render._item_element`: sanitized, guid filled in), so an item
has the same id in every format: its RSS ``<guid>``.  Titles, names and tags are plain
text; ``content_html`` is the sanitized HTML of ``content:encoded``, else of
``description``.  Dates and authors are those of Atom: ``date_published`` only from the
item's own date (the time ROSES received it is no publication date), ``date_modified``
as Atom's ``updated``.  Like the other renderers this is a pure function of its
arguments, so equal documents have equal bytes (and ETags).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from lxml import etree

from roses_app.items import FEED_NAMESPACES, iso8601
from roses_app.publish.entries import element_text, entry_times, inner_markup, item_element
from roses_app.publish.itemfields import people
from roses_app.publish.render import CONTENT_NS, GENERATOR, FeedInfo
from roses_app.publish.sanitize import label, plain_text
from roses_app.store import StoredEntry

JSON_FEED_VERSION = "https://jsonfeed.org/version/1.1"
JSON_FEED_MEDIA_TYPE = "application/feed+json"
# JSON Feed requires a MIME type on every attachment; RSS enclosures may lack one.
UNKNOWN_MEDIA_TYPE = "application/octet-stream"
_HTTP = re.compile(r"https?://", re.IGNORECASE)
_MEDIA_NS = FEED_NAMESPACES["media"]


def item_link(el: etree._Element) -> str | None:
    """The item's web page: ``<link>``, else a permalink ``<guid>`` (as in Atom)."""
    link = (el.findtext("link") or "").strip()
    if link:
        return link
    guid = el.find("guid")
    text = "" if guid is None else (guid.text or "").strip()
    if guid is not None and guid.get("isPermaLink", "true") != "false" and _HTTP.match(text):
        return text
    return None


def _authors(el: etree._Element) -> list[dict[str, str]]:
    """The item's authors (as Atom has them) as JSON Feed authors: a name, and an
    address as a ``mailto:`` URL."""
    out: list[dict[str, str]] = []
    for person in people(el):
        author = {"name": person.name or person.email}
        if person.email:
            author["url"] = f"mailto:{person.email}"
        out.append(author)
    return out


def _attachments(el: etree._Element) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for enclosure in el.findall("enclosure"):
        url = (enclosure.get("url") or "").strip()
        if not url:
            continue  # dropped by the sanitizer (unsafe scheme) or never there
        attachment: dict[str, Any] = {
            "url": url,
            "mime_type": (enclosure.get("type") or "").strip() or UNKNOWN_MEDIA_TYPE,
        }
        length = (enclosure.get("length") or "").strip()
        if length.isdigit() and int(length) > 0:
            attachment["size_in_bytes"] = int(length)
        out.append(attachment)
    return out


def json_item(el: etree._Element, entry: StoredEntry) -> dict[str, Any]:
    """One sanitized ``<item>`` (from ``_item_element``) as a JSON Feed item."""
    guid = element_text(el.find("guid")) or entry.guid
    item: dict[str, Any] = {"id": guid}
    link = item_link(el)
    if link:
        item["url"] = link
    title = element_text(el.find("title"))
    if title:
        item["title"] = title
    description = inner_markup(el.find("description")).strip()
    content = inner_markup(el.find(f"{{{CONTENT_NS}}}encoded")).strip()
    if content:
        item["content_html"] = content
        summary = plain_text(description)
        if summary:
            item["summary"] = summary
    elif description:
        item["content_html"] = description
    else:
        item["content_text"] = ""  # one of content_html/content_text is required
    thumbnail = el.find(f"{{{_MEDIA_NS}}}thumbnail")
    if thumbnail is not None and _HTTP.match(thumbnail.get("url") or ""):
        item["image"] = thumbnail.get("url")
    published, updated = entry_times(el, entry)
    if published is not None:
        item["date_published"] = iso8601(published)
    item["date_modified"] = iso8601(updated)
    authors = _authors(el)
    if authors:
        item["authors"] = authors
    tags = [t for t in (element_text(c) for c in el.findall("category")) if t]
    if tags:
        item["tags"] = list(dict.fromkeys(tags))  # JSON Feed tags are a set of strings
    attachments = _attachments(el)
    if attachments:
        item["attachments"] = attachments
    return item


def json_items(entries: Sequence[StoredEntry]) -> list[dict[str, Any]]:
    """The JSON Feed items of ``entries``, in their order; malformed ones are skipped."""
    out: list[dict[str, Any]] = []
    for entry in entries:
        el = item_element(entry)
        if el is not None:
            out.append(json_item(el, entry))
    return out


def render_json(
    feed: FeedInfo, entries: Sequence[StoredEntry], *, updated: float | None = None
) -> bytes:
    """A JSON Feed 1.1 document of ``entries`` (newest first, as given).

    ``updated`` is accepted like the other renderers'; JSON Feed has no feed-level date.
    """
    del updated
    doc: dict[str, Any] = {
        "version": JSON_FEED_VERSION,
        "title": label(feed.title, feed.stream),
        "home_page_url": feed.html_url,
    }
    if feed.json_url:
        doc["feed_url"] = feed.json_url
    description = plain_text(feed.description)
    if description:
        doc["description"] = description
    doc["authors"] = [{"name": GENERATOR}]
    if feed.hubs:  # WebSub discovery, as the RSS and Atom documents' rel="hub" links
        doc["hubs"] = [{"type": "WebSub", "url": hub} for hub in feed.hubs]
    if feed.hubs:  # WebSub discovery, as JSON Feed 1.1 spells it
        doc["hubs"] = [{"type": "WebSub", "url": hub} for hub in feed.hubs]
    doc["items"] = json_items(entries)
    return (json.dumps(doc, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def newest_date(entry: StoredEntry) -> int | None:
    """The date of an item as its feeds show it: its own, else when it was received."""
    el = item_element(entry)
    if el is None:
        return None
    published, updated = entry_times(el, entry)
    return published if published is not None else updated


__all__ = [
    "JSON_FEED_MEDIA_TYPE",
    "JSON_FEED_VERSION",
    "item_link",
    "json_item",
    "json_items",
    "newest_date",
    "render_json",
]
