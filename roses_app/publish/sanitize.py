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

* titles, author names, category labels and source names are plain text (see
  :func:`plain_text`): many readers render an RSS ``<title>`` as HTML, so
  ``<title>&lt;img src=x onerror=alert(1)&gt;</title>`` must not reach them as markup.

It is a pure function of the item: rendering twice gives the same bytes (ETags).
"""

from __future__ import annotations

import re
from html import unescape

import nh3
from lxml import etree

from roses_app.items import FEED_NAMESPACES

CONTENT_NS = FEED_NAMESPACES["content"]
HTML_ELEMENTS: tuple[str, ...] = ("description", f"{{{CONTENT_NS}}}encoded")
_DC, _MEDIA, _ITUNES = (FEED_NAMESPACES[k] for k in ("dc", "media", "itunes"))
# Titles, names and labels: plain text.  A title may be empty; the others are then dropped.
TITLE_ELEMENTS: tuple[str, ...] = (
    "title",
    f"{{{_DC}}}title",
    f"{{{_MEDIA}}}title",
    f"{{{_ITUNES}}}title",
)
LABEL_ELEMENTS: tuple[str, ...] = (
    "author",
    "category",
    "source",
    f"{{{_DC}}}creator",
    f"{{{_DC}}}contributor",
    f"{{{_DC}}}subject",
    f"{{{_MEDIA}}}category",
    f"{{{_MEDIA}}}credit",
    f"{{{_ITUNES}}}author",
)
LINK_ELEMENTS: tuple[str, ...] = ("link", "comments")
URL_ATTRIBUTES: frozenset[str] = frozenset({"url", "href", "src"})
SAFE_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES)

_CLEANER = nh3.Cleaner(url_schemes=set(SAFE_SCHEMES))
_TEXT_CLEANER = nh3.Cleaner(tags=set())  # no tag at all: script/style lose their content too
# Each pass removes one level of escaping ("&amp;lt;b&amp;gt;" -> "&lt;b&gt;" -> "<b>" -> "");
# text escaped more often than this is left inert by _TAG_OPEN instead.
_TEXT_PASSES = 4
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
# "Name <user@host>" would lose its address as a tag: written the RSS way first.
_NAME_ADDRESS = re.compile(r"\s*\"?([^<>\"]*?)\"?\s*<([^<>\s@]+@[^<>\s]+)>\s*")
# Browsers ignore ASCII control characters and spaces in and around a scheme.
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
_SCHEME = re.compile(r"([^/?#]*?):")
_VALID_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")


def sanitize_html(html: str) -> str:
    """``html`` with only harmless tags, attributes and URLs left; the text is kept."""
    return _CLEANER.clean(html)


def plain_text(value: str) -> str:
    """``value`` as the text an HTML renderer would show, with no markup left.

    Tags, comments and the content of ``script``/``style`` are removed, entities decoded
    and runs of white space become one space.  The result is safe however a reader
    takes it: as text (Atom ``type="text"``, OPML) or as HTML (many RSS readers), since
    it has no ``<`` that opens a tag.  Text without markup is kept as it is (white
    space aside), so reducing twice gives the same text.
    """
    text = value
    for _ in range(_TEXT_PASSES):
        if "<" not in text and "&" not in text:
            break
        reduced = unescape(_TEXT_CLEANER.clean(text))
        if reduced == text:
            break
        text = reduced
    return " ".join(_TAG_OPEN.sub("", text).split())


def plain_author(value: str) -> str:
    """An author as plain text; ``Name <user@host>`` becomes ``user@host (Name)``."""
    match = _NAME_ADDRESS.fullmatch(value)
    if match:
        name, address = match.group(1).strip(), match.group(2)
        value = f"{address} ({name})" if name else address
    return plain_text(value)


def label(*candidates: str) -> str:
    """The first candidate that is not empty as plain text (a title, a feed name)."""
    for candidate in candidates:
        text = plain_text(candidate)
        if text:
            return text
    return "(untitled)"


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


def _reduce_to_text(item: etree._Element) -> None:
    """Titles, names and labels (escaped text or child elements) as plain text."""
    for element in list(item.iter(*TITLE_ELEMENTS, *LABEL_ELEMENTS)):
        markup = _inner_html(element)
        person = etree.QName(element).localname in ("author", "creator")
        text = plain_author(markup) if person else plain_text(markup)
        for child in list(element):
            element.remove(child)
        element.text = text
        if element.get("type") is not None:  # media:title type="html"
            element.set("type", "plain")
        parent = element.getparent()
        if not text and element.tag not in TITLE_ELEMENTS and parent is not None:
            parent.remove(element)


def sanitize_item(item: etree._Element) -> etree._Element:
    """Sanitize ``item`` in place (and return it); see the module doc."""
    _reduce_to_text(item)
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
