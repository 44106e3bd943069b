"""A feed source's own categories (``categories:``, e.g. the folders of an OPML
import) added to each of its items as ``<category>``.

They go where RSS 2.0 puts categories, after the item's own ones (the canonical
order is ``title, link, description, content:encoded, pubDate, guid, author,
category*, enclosure*, ...``), and a category the item already has is not repeated.
So a query can select the items of a folder (``category = 'Tech'``), and readers show
the folder.  The result depends only on the item and the source's configuration: the
same entry still gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from lxml import etree

from roses_app.connectors.xmlize import CONTENT_NS, clean_text
from roses_app.items import parse_item, serialize

# The children that come before the categories added (the item's own categories too).
_BEFORE = frozenset(
    [
        "title",
        "link",
        "description",
        f"{{{CONTENT_NS}}}encoded",
        "pubDate",
        "guid",
        "author",
        "category",
    ]
)

Items = list[tuple[str, int | None]]


def add_categories(items: Items, categories: Sequence[str]) -> Items:
    """``items`` (serialized, with their published time) with ``categories`` added;
    the same list when there are none."""
    if not categories:
        return items
    return [(_with_categories(xml, categories), published) for xml, published in items]


def _with_categories(xml: str, categories: Sequence[str]) -> str:
    item = parse_item(xml)
    have = {child.text for child in item if child.tag == "category"}
    position = 0
    for index, child in enumerate(item):
        if child.tag in _BEFORE:
            position = index + 1
    for category in categories:
        text = clean_text(category)
        if text and text not in have:
            added = etree.Element("category")
            added.text = text
            item.insert(position, added)
            position += 1
            have.add(text)
    return serialize(item)
