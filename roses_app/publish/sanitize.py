"""Sanitizing items before publication: no script reaches a subscriber.

Items come from the open web (and from users' mutators); feed readers render their
HTML.  Before an item is published, in RSS or Atom:

* the HTML of ``description`` and ``content:encoded`` (escaped text, or child
  elements a mutator built) goes through nh3 (the Rust ``ammonia`` sanitizer): an
  allow-list of tags and attributes; ``script``, ``style`` and their content, every
  ``on*`` event handler, ``javascript:``/``data:``/``vbscript:`` URLs are removed,
  the text is kept.  The result is escaped text again;
* URLs outside the HTML are checked too: an element whose text is a link (``link``,
  ``comments``) or an attribute holding a URL (``url``, ``href``, ``src``, on any
  element, e.g. ``enclosure``, ``media:content``, ``itunes:image``) is dropped when its
  scheme is not an ordinary one (http, https, mailto, ftp...; relative URLs are kept);
  a ``guid`` that is not a safe URL stops being a permalink.

It is a pure function of the item: rendering twice gives the same bytes (ETags).
"""

from __future__ import annotations

import re

import nh3
from lxml import etree

from roses_app.items import FEED_NAMESPACES

CONTENT_NS = FEED_NAMESPACES["content"]
HTML_ELEMENTS: tuple[str, ...] = ("description", f"{{{CONTENT_NS}}}encoded")
LINK_ELEMENTS: tuple[str, ...] = ("link", "comments")
URL_ATTRIBUTES: frozenset[str] = frozenset({"url", "href", "src"})
SAFE_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES)

_CLEANER = nh3.Cleaner(url_schemes=set(SAFE_SCHEMES))
# Browsers ignore ASCII control characters and spaces in and around a scheme.
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
_SCHEME = re.compile(r"([^/?#]*?):")
_VALID_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")


def sanitize_html(html: str) -> str:
    """``html`` with only harmless tags, attributes and URLs left; the text is kept."""
    return _CLEANER.clean(html)


def safe_url(url: str) -> bool:
    """True for a relative URL or one with an ordinary scheme (not ``javascript:``...)."""
    compact = _IGNORED.sub("", url)
    match = _SCHEME.match(compact)
    if match is None:
        return True  # no scheme: relative
    scheme = match.group(1).lower()
    return bool(_VALID_SCHEME.fullmatch(scheme)) and scheme in SAFE_SCHEMES


def _inner_html(element: etree._Element) -> str:
    parts = [element.text or ""]
    for child in element:
        parts.append(etree.tostring(child, encoding="unicode", with_tail=True))
    return "".join(parts)


def sanitize_item(item: etree._Element) -> etree._Element:
    """Sanitize ``item`` in place (and return it); see the module doc."""
    for tag in HTML_ELEMENTS:
        for element in item.iter(tag):
            html = _inner_html(element)
            clean = sanitize_html(html)
            if clean != html or len(element):
                for child in list(element):
                    element.remove(child)
                element.text = clean
    for tag in LINK_ELEMENTS:
        for element in list(item.iter(tag)):
            if not safe_url(element.text or ""):
                parent = element.getparent()
                if parent is not None:
                    parent.remove(element)
    for element in item.iter():
        if not isinstance(element.tag, str):
            continue  # comments and processing instructions
        for name in [n for n in element.attrib if etree.QName(n).localname in URL_ATTRIBUTES]:
            if not safe_url(element.attrib[name]):
                del element.attrib[name]
    for guid in item.iter("guid"):
        if guid.get("isPermaLink", "true") != "false" and not safe_url(guid.text or ""):
            guid.set("isPermaLink", "false")
    return item
