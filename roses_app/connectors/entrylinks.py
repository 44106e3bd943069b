"""An entry's own web page among the links feedparser reports.

feedparser's ``entry.link`` is the last link it met anywhere inside the entry, nested
ones included: an rbc.ru item lists related stories as ``<rbc_news:related_links><link
url="..."/>...`` after its own ``<link>``, and feedparser gives the last related story
as the item's link (28 items of 30 in a real capture).  ``entry.links`` keeps every
link in document order, but a nested one looks like the item's own (relation
``alternate``, type ``text/html``).  So the document is read once more with lxml, and
for each item or entry only the ``<link>`` and ``atom:link`` elements that are its own
children are taken as its own links.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urljoin

from lxml import etree

from roses_app.connectors.entryfields import clean_text, dict_list, get_field, text_field

# The elements feedparser makes entries of: RSS items (no namespace, RSS 0.90 or 1.0)
# and Atom entries (0.3 or 1.0).
_RSS_NS = (None, "http://my.netscape.com/rdf/simple/0.9/", "http://purl.org/rss/1.0/")
_ATOM_NS = ("http://www.w3.org/2005/Atom", "http://purl.org/atom/ns#")
_ENTRY_ELEMENTS = frozenset([("item", ns) for ns in _RSS_NS] + [("entry", ns) for ns in _ATOM_NS])
_HTML_TYPES = ("text/html", "application/xhtml+xml", "html", "xhtml")


def own_links(body: bytes) -> list[list[str]] | None:
    """Each item's or entry's own links, in document order: the text (or ``href``) of
    its ``<link>`` children and the ``href`` of its ``atom:link`` children of relation
    ``alternate``.  None when the body cannot be read as XML."""
    # No DTD, no entity expansion, no network: the body is what a stranger sent.  A
    # parser of its own: lxml's parsers must not be shared between threads.
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, recover=True, huge_tree=False
    )
    try:
        root = etree.fromstring(body, parser)
    except (etree.XMLSyntaxError, ValueError):
        return None
    if root is None:
        return None
    out: list[list[str]] = []
    for element in root.iter(etree.Element):
        name = etree.QName(element)
        if (name.localname, name.namespace) in _ENTRY_ELEMENTS:
            out.append([link for child in element if (link := _own_link(child))])
    return out


def _own_link(child: etree._Element) -> str:
    if not isinstance(child.tag, str):
        return ""  # a comment or processing instruction
    name = etree.QName(child)
    if name.localname != "link":
        return ""
    if name.namespace in _ATOM_NS and child.get("rel", "alternate") != "alternate":
        return ""
    return clean_text(child.get("href") or child.text or "").strip()


def entry_link(entry: Mapping[str, Any], own: Sequence[str] | None) -> str:
    """The entry's own web page: the first ``alternate`` HTML link of ``entry.links``
    that the entry names itself (``own``, from :func:`own_links`).  When its own links
    are unknown (``own`` None), the first ``alternate`` HTML link; when it names none,
    the guid feedparser took as a permalink; else feedparser's ``entry.link``."""
    alternates = [
        clean_text(link.get("href")).strip()
        for link in dict_list(get_field(entry, "links"))
        if link.get("rel", "alternate") == "alternate"
        and str(link.get("type") or "text/html").lower() in _HTML_TYPES
        and link.get("href")
    ]
    if own is None:
        return alternates[0] if alternates else text_field(entry, "link")
    if not own:  # every link in it is nested in another element
        return text_field(entry, "id") if get_field(entry, "guidislink") else ""
    for href in alternates:
        if any(_names(href, mine) for mine in own):
            return href
    # its own links were not recognised (written differently): the first is likeliest
    return alternates[0] if alternates else text_field(entry, "link")


def _names(href: str, written: str) -> bool:
    """True when ``written`` (as the document has it, maybe relative) is ``href`` (as
    feedparser resolved it against whatever base applied)."""
    return written == href or urljoin(href, written) == href
