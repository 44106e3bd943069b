"""Items the engine builds itself: window stamps on aggregates, nest and unnest.

Both engines call these functions, so their results are identical byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from urllib.parse import quote

from lxml import etree

from roses_app.items import content_hash, iso8601, item_identity
from roses_app.xmlfn.xpath import parse

ROSES_NS = "urn:x-roses"
_WINDOW = f"{{{ROSES_NS}}}window"
_NESTED = f"{{{ROSES_NS}}}nested"
_WITHDRAWN = f"{{{ROSES_NS}}}withdrawn"
_GROUPING = f"{{{ROSES_NS}}}grouping"


def window_guid(stream: str, start: int, end: int, key: str | None = None) -> str:
    """One guid per stream, window and key: a re-computed window replaces its item."""
    guid = f"roses:{quote(stream, safe='')}/{start}/{end}"
    return guid if key is None else f"{guid}/{quote(key, safe='')}"


def session_guid(stream: str, ident: int, key: str | None = None) -> str:
    """A session's guid: named by its first item (its bounds change as it grows)."""
    guid = f"roses:{quote(stream, safe='')}/session/{ident}"
    return guid if key is None else f"{guid}/{quote(key, safe='')}"


def stamp_window(
    xml: str,
    stream: str,
    start: int,
    end: int,
    key: str | None = None,
    revision: int = 0,
    ident: int | None = None,
) -> str:
    """The reducer's item with the window's guid and bounds (``roses:window``), and its
    revision number when it replaces results published before (``revision`` > 0); a
    session's guid is named by ``ident`` (the seq of its first item)."""
    root = parse(xml)
    for old in [*root.findall("guid"), *root.findall(_WINDOW)]:
        root.remove(old)
    guid = etree.SubElement(root, "guid", isPermaLink="false")
    guid.text = (
        window_guid(stream, start, end, key) if ident is None else session_guid(stream, ident, key)
    )
    window = etree.SubElement(root, _WINDOW, nsmap={"roses": ROSES_NS})
    window.set("start", iso8601(start))
    window.set("end", iso8601(end))
    if key is not None:
        window.set("key", key)
    if revision:
        window.set("revision", str(revision))
    return etree.tostring(root, encoding="unicode")


def grouping_guid(stream: str, key: str, seq: int, anchor: str) -> str:
    """A windowed grouping's result over publication time: named by its key, the seq
    of its item and ``anchor``, a digest of that item (its content changes when a
    late item comes before it; one event may give two items of a key)."""
    return f"roses:{quote(stream, safe='')}/grouping/{quote(key, safe='')}/{seq}/{anchor}"


def stamp_grouping(
    xml: str, stream: str, key: str, seq: int, anchor: str, time: int, revision: int
) -> str:
    """The reducer's item with its guid and ``roses:grouping`` (key, its item's time,
    and its revision number when it replaces results published before)."""
    root = parse(xml)
    for old in [*root.findall("guid"), *root.findall(_GROUPING)]:
        root.remove(old)
    guid = etree.SubElement(root, "guid", isPermaLink="false")
    guid.text = grouping_guid(stream, key, seq, anchor)
    grouping = etree.SubElement(root, _GROUPING, nsmap={"roses": ROSES_NS})
    grouping.set("key", key)
    grouping.set("time", iso8601(time))
    if revision:
        grouping.set("revision", str(revision))
    return etree.tostring(root, encoding="unicode")


def merged_session(
    stream: str, ident: int, into: int, start: int, end: int, key: str | None, revision: int
) -> str:
    """What replaces a published session merged into an older one by an item that
    bridged them: a pointer to the session it is now part of."""
    target = session_guid(stream, into, key)
    root = etree.Element("item")
    etree.SubElement(root, "title").text = "Merged into an earlier session"
    etree.SubElement(root, "description").text = f"This session is now part of {target}."
    xml = etree.tostring(root, encoding="unicode")
    stamped = parse(stamp_window(xml, stream, start, end, key, revision, ident))
    window = stamped.find(_WINDOW)
    assert window is not None  # stamp_window adds it
    window.set("merged-into", target)
    return etree.tostring(stamped, encoding="unicode")


def withdrawn_item(xml: str) -> str:
    """What takes the place of an item published optimistically (a join's or a
    difference's item without a partner) once a late partner came: a notice with the
    item's identity (its guid, else its link, else its content hash, as the store
    computes it), so that feeds replace the entry in place."""
    item = parse(xml)
    identity = item_identity(item) or content_hash(xml)
    title = (item.findtext("title") or "").strip()
    root = etree.Element("item")
    etree.SubElement(root, "title").text = f"Withdrawn: {title}" if title else "Withdrawn"
    etree.SubElement(root, "description").text = (
        "Taken back: an item that arrived after this one is its partner, so this "
        "stream no longer publishes it alone."
    )
    guid = etree.SubElement(root, "guid", isPermaLink="false")
    guid.text = identity
    etree.SubElement(root, _WITHDRAWN, nsmap={"roses": ROSES_NS})
    return etree.tostring(root, encoding="unicode")


def nest_items(xmls: Sequence[str], ts: int) -> str:
    """Nest: one item holding the items of one timestamp, in order."""
    root = etree.Element("item")
    etree.SubElement(root, "title").text = f"{len(xmls)} items"
    nested = etree.SubElement(root, _NESTED, nsmap={"roses": ROSES_NS})
    nested.set("at", iso8601(ts))
    for xml in xmls:
        nested.append(parse(xml))
    return etree.tostring(root, encoding="unicode")


def unnest_items(xml: str) -> list[str]:
    """Unnest: the ``item`` elements one level below the item's children."""
    out = []
    for inner in parse(xml).iterfind("*/item"):
        alone = deepcopy(inner)  # without the enclosing item's namespace declarations
        etree.cleanup_namespaces(alone)
        out.append(etree.tostring(alone, encoding="unicode"))
    return out


def compose_items(xml1: str, xml2: str) -> str:
    """The built-in composition i1·i2 of a join without ``combine``: i1, with i2 nested
    in a ``roses:related`` element."""
    root = parse(xml1)
    related = etree.SubElement(root, f"{{{ROSES_NS}}}related", nsmap={"roses": ROSES_NS})
    related.append(parse(xml2))
    return etree.tostring(root, encoding="unicode")
