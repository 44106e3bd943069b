"""Sanitizing items before publication: no script reaches a subscriber.

Items come from the open web (and from users' mutators); feed readers render their
HTML.  Before an item is published, in RSS or Atom:

* the HTML of ``description`` and ``content:encoded`` (escaped text, or child
  elements a mutator built) goes through nh3 (the Rust ``ammonia`` sanitizer): an
  allow-list of tags and attributes; ``script``, ``style`` and their content, every
  ``on*`` event handler, ``javascript:``/``data:``/``vbscript:`` URLs are removed,
  the text is kept.  The result is escaped text again;
* URLs outside the HTML follow :mod:`roses_app.urls`: an element whose text is a link
  (``link``, ``comments``) or an attribute holding a URL (``url``, ``href``, ``src``, on
  any element, e.g. ``enclosure``, ``media:content``, ``itunes:image``) is dropped unless
  it is an http(s) URL; a category's ``domain`` unless it is a name, a web URL or an
  identifier; a ``guid`` that is no web URL stops being a permalink;

* author names, category labels, source names and ``dc:rights`` are plain text (see
  :func:`plain_text`): many readers render an RSS ``<title>`` as HTML, so
  ``<title>&lt;img src=x onerror=alert(1)&gt;</title>`` must not reach them as markup.
  A title is plain text too, but its own: text that merely looks like markup
  (``<p>Entry Title</p>``, tags the sanitizer keeps, with no attribute) stays as it is
  (:func:`title_text`), since shown as HTML it does nothing.

It is a pure function of the item: rendering twice gives the same bytes (ETags).
"""

from __future__ import annotations

import re
from html import unescape

import nh3
from lxml import etree

from roses_app.items import FEED_NAMESPACES
from roses_app.urls import scheme_of, taxonomy, web_url

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
    f"{{{_DC}}}rights",
)
LINK_ELEMENTS: tuple[str, ...] = ("link", "comments")
URL_ATTRIBUTES: frozenset[str] = frozenset({"url", "href", "src"})
_XML = "{http://www.w3.org/XML/1998/namespace}"
_RDF = "{http://www.w3.org/1999/02/22-rdf-syntax-ns#}"
BASE_ATTRIBUTES: frozenset[str] = frozenset({f"{_XML}base"})  # a web URL, as the above
# RDF's resource names: a web URL or an identifier (urn:, tag:), as a category's domain
NAME_ATTRIBUTES: frozenset[str] = frozenset({"domain", f"{_RDF}resource", f"{_RDF}about"})
SAFE_SCHEMES: frozenset[str] = frozenset(nh3.ALLOWED_URL_SCHEMES)
# Tags that do nothing shown as HTML when written without attributes: text in a title.
_INERT_TAGS = frozenset(nh3.ALLOWED_TAGS)
_BARE_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)\s*/?>")

_CLEANER = nh3.Cleaner(url_schemes=set(SAFE_SCHEMES))
_TEXT_CLEANER = nh3.Cleaner(tags=set())  # no tag at all: script/style lose their content too
# Each pass removes one level of escaping ("&amp;lt;b&amp;gt;" -> "&lt;b&gt;" -> "<b>" -> "");
# text escaped more often than this is left inert by _TAG_OPEN instead.
_TEXT_PASSES = 4
_TAG_OPEN = re.compile(r"<(?=[A-Za-z/!?])")
# "Name <user@host>" would lose its address as a tag: written the RSS way first.
_NAME_ADDRESS = re.compile(r"\s*\"?([^<>\"]*?)\"?\s*<([^<>\s@]+@[^<>\s]+)>\s*")
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


def _inert_markup(text: str) -> bool:
    """True when ``text`` holds tags and each, at every level of escaping a reader may
    decode, is a tag the sanitizer keeps written with no attribute (``<p>``, ``</b>``)."""
    level, tags = text, False
    for _ in range(_TEXT_PASSES):
        for opening in _TAG_OPEN.finditer(level):
            bare = _BARE_TAG.match(level, opening.start())
            if bare is None or bare.group(1).lower() not in _INERT_TAGS:
                return False
            tags = True
        decoded = unescape(level)
        if decoded == level:
            return tags
        level = decoded
    return False  # escaped more often than is looked at


def title_text(value: str) -> str:
    """A title's text as published: text that looks like markup but does nothing as
    HTML (``<p>Entry Title</p>``) is the title itself (white space aside); anything else
    is :func:`plain_text` (a reader rendering titles as HTML would run or load it)."""
    if _inert_markup(value):
        return " ".join(value.split())
    return plain_text(value)


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
    """True for a relative URL or one with an ordinary scheme (not ``javascript:``...):
    the rule for links inside HTML."""
    scheme = scheme_of(url)
    if scheme is None:
        return True  # no scheme: relative
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
        if person:
            text = plain_author(markup)
        elif element.tag in TITLE_ELEMENTS and not len(element):  # text, not elements
            text = title_text(markup)
        else:
            text = plain_text(markup)
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
    _check_urls(item)
    return item


def _check_urls(item: etree._Element) -> None:
    """URLs outside the HTML as :mod:`roses_app.urls` allows them (the module doc)."""
    for tag in LINK_ELEMENTS:
        for element in list(item.iter(tag)):
            parent = element.getparent()
            if not web_url(element.text) and parent is not None:
                parent.remove(element)
    for element in item.iter(etree.Element):
        for name in list(element.attrib):
            value = element.attrib[name]
            if name in NAME_ATTRIBUTES:
                refused = not taxonomy(value)
            else:
                as_url = name in BASE_ATTRIBUTES or etree.QName(name).localname in URL_ATTRIBUTES
                refused = as_url and not web_url(value)
            if refused:
                del element.attrib[name]
    for guid in item.iter("guid"):
        if guid.get("isPermaLink", "true") != "false" and not web_url(guid.text):
            guid.set("isPermaLink", "false")
