"""A stored entry as the item element every published format starts from, and the
fields each format reads the same way (text, inner markup, published and updated)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache

from lxml import etree

from roses_app.items import FEED_NAMESPACES, parse_item
from roses_app.publish.itemfields import fix_dates, fix_uris, parse_date
from roses_app.publish.sanitize import sanitize_item
from roses_app.store import StoredEntry

log = logging.getLogger(__name__)

ATOM_NS = FEED_NAMESPACES["atom"]
DC_NS = FEED_NAMESPACES["dc"]


def element_text(el: etree._Element | None) -> str:
    if el is None:
        return ""
    return "".join(el.itertext()).strip()


def inner_markup(el: etree._Element | None) -> str:
    """The content of an element as an HTML string (escaped text or child elements)."""
    if el is None:
        return ""
    parts = [el.text or ""]
    for child in el:
        parts.append(etree.tostring(child, encoding="unicode", with_tail=True))
    return "".join(parts)


# sanitized items kept, serialized: an entry is rendered once per format of its feed
# and an item is in the feed of every subscription it matches (a 10,000-subscription
# export made 37,825 items from 1,000, at about 0.25 ms each; parsing one kept costs
# a tenth of that).  Items longer than KEPT_CHARS (whole articles) are made each
# time: the cache holds at most FIXED_ITEMS x 2 x KEPT_CHARS (about 32 MB).
FIXED_ITEMS = 1024
KEPT_CHARS = 16_384


def item_element(entry: StoredEntry) -> etree._Element | None:
    """The stored item as an ``<item>`` element, with its guid filled in, sanitized
    (HTML and URLs: see :mod:`roses_app.publish.sanitize`), and its dates and URIs in
    the forms RSS and Atom ask (:mod:`roses_app.publish.itemfields`).  A new element
    at each call: renderers move it into their documents."""
    make = _fixed_item if len(entry.item) <= KEPT_CHARS else _fixed_item.__wrapped__
    fixed, error = make(entry.item, received(entry), entry.guid)
    if fixed is None:
        log.warning("skipping a malformed stored item of %r: %s", entry.stream, error)
        return None
    return parse_item(fixed)


@lru_cache(maxsize=FIXED_ITEMS)
def _fixed_item(item: str, received: int, guid: str) -> tuple[bytes | None, str]:
    """:func:`item_element`'s element, serialized (or None and why it is not one)."""
    try:
        el = parse_item(item)
    except etree.XMLSyntaxError as exc:
        return None, str(exc)
    if el.tag != "item":
        wrapper = etree.Element("item")
        wrapper.append(el)
        el = wrapper
    fix_dates(el, received)
    if el.find("guid") is None:
        guid_el = etree.SubElement(el, "guid", isPermaLink="false")
        guid_el.text = guid
    sanitize_item(el)
    fix_uris(el)
    return etree.tostring(el, encoding="utf-8"), ""


def received(entry: StoredEntry) -> int:
    """When ROSES received an item, in microseconds.  All items of a poll share that
    time (``entry.ts``); their order (``entry.seq``) tells them apart, under 1 ms after
    it, so that entries keep distinct updated times (Atom readers expect them; outputs of
    one event still share one: :func:`distinct_updated`)."""
    return entry.ts + entry.seq % 1000


def entry_times(el: etree._Element, entry: StoredEntry) -> tuple[int | None, int]:
    """(published, updated) in microseconds: pubDate (or dc:date) and atom:updated,
    else the publication date.  An undated item has no published time; its updated
    time is when ROSES received it (:func:`received`)."""
    published = parse_date(el.findtext("pubDate"))
    if published is None:
        published = parse_date(el.findtext(f"{{{DC_NS}}}date"))
    updated = parse_date(el.findtext(f"{{{ATOM_NS}}}updated"))
    if updated is None or (published is not None and updated < published):
        updated = published
    return published, updated if updated is not None else received(entry)


def distinct_updated(times: Sequence[tuple[int | None, int]]) -> list[int]:
    """The updated times of a document's entries, ``(published, updated)`` newest
    first as :func:`entry_times` gives them, made distinct.

    Atom readers (and the W3C validator) tell entries apart by them, yet entries of one
    date, or undated entries received together, would share one.  From the oldest on,
    a time already taken moves a microsecond later: a newer entry keeps the later time
    and none is updated before it was published."""
    taken: set[int] = set()
    out: list[int] = []
    for _published, updated in reversed(times):
        while updated in taken:
            updated += 1
        taken.add(updated)
        out.append(updated)
    return out[::-1]
