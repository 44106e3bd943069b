"""Fields of feedparser's entries, read safely and checked: text XML can hold, plain
text, absolute URIs, e-mail addresses, and the feed an entry comes from (used by
:mod:`.xmlize`).

feedparser's dictionaries answer some keys with others (``updated`` with ``published``)
or raise on keys they cannot derive; :func:`get_field` reads what is really there.
"""

from __future__ import annotations

import calendar
import html
import mimetypes
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin

import lxml.html
from lxml import etree

from roses_app.items import MICROS, rfc822
from roses_app.urls import web_url

# Everything outside the XML 1.0 Char production (control characters, lone
# surrogates, U+FFFE/U+FFFF).
_INVALID_XML_CHARS = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NO_FALLBACK = frozenset({"updated", "updated_parsed"})
_HTML_TYPES = ("text/html", "application/xhtml+xml")
# An absolute URI (a scheme, then no white space); http(s) ones name a host.
ABSOLUTE_URI = re.compile(r"(?!https?:(?!//[^/?#\s]))[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"]+\Z")
EMAIL = re.compile(r"[^@\s()<>,;:\"\[\]]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z0-9][-A-Za-z0-9]*")


def clean_text(value: object) -> str:
    """``value`` as a string holding only characters XML 1.0 allows."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return _INVALID_XML_CHARS.sub("", text)


def get_field(mapping: Any, key: str) -> Any:
    if key in _NO_FALLBACK and isinstance(mapping, dict):
        # FeedParserDict answers updated* with published* (and a warning) when absent.
        return dict.get(mapping, key)
    try:
        return mapping.get(key)
    except (KeyError, AttributeError, TypeError, ValueError, IndexError):
        return None  # FeedParserDict raises these for some derived keys it cannot build


def text_field(mapping: Any, key: str) -> str:
    value = get_field(mapping, key)
    if value is None or isinstance(value, (dict, list, tuple)):
        return ""
    return clean_text(value).strip()


def html_text(markup: str) -> str:
    """The text an HTML fragment shows: tags dropped, entities decoded."""
    try:
        text = lxml.html.fragment_fromstring(markup, create_parent="div").text_content()
    except (etree.ParserError, ValueError):
        return markup
    return clean_text(text).strip()


def plain_field(entry: Mapping[str, Any], key: str, *, markup_is_text: bool) -> str:
    """Field ``key`` (``title``, ``rights``) as plain text.

    feedparser calls a field HTML when the feed declares it (Atom's ``type="html"``) and
    also when it guesses so from the text (RSS declares nothing), and then hands it on
    sanitized, entities escaped.  ``markup_is_text``: what looks like markup is the
    text itself (an RSS title, plain text: ``&lt;p&gt;Title&lt;/p&gt;`` reads
    ``<p>Title</p>``), so only the escaping is undone; otherwise HTML becomes its text.
    """
    value = text_field(entry, key)
    detail = get_field(entry, f"{key}_detail")
    kind = detail.get("type", "") if isinstance(detail, Mapping) else ""
    if not value or kind not in _HTML_TYPES:
        return value
    if markup_is_text:
        return clean_text(html.unescape(value)).strip()
    return html_text(value)


def dict_list(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [v for v in value if isinstance(v, Mapping)]


def self_link(mapping: Any) -> str:
    for candidate in dict_list(get_field(mapping, "links")):
        if candidate.get("rel") == "self" and candidate.get("href"):
            return clean_text(candidate["href"]).strip()
    return ""


def source_of(entry: Mapping[str, Any], feed: Mapping[str, Any], url: str) -> tuple[str, str]:
    """(title, feed URL) of the feed the entry comes from: its own ``<source>`` if it
    names one, else the feed read (its self link, else the URL it was fetched from)."""
    own = get_field(entry, "source")
    if isinstance(own, Mapping):
        title = clean_text(own.get("title") or "").strip()
        href = self_link(own) or clean_text(own.get("href") or "").strip()
        if title or href:
            return title, web_uri(href, url)
    href = self_link(feed) or (url if is_web_url(url) else "")
    return text_field(feed, "title"), web_uri(href, url)


def absolute_uri(href: str, base: str) -> str:
    """``href`` as an absolute URI, resolved against a web ``base``; "" when it cannot be."""
    href = re.sub(r"\s", lambda m: f"%{ord(m.group()):02X}", href.strip())
    if href and not ABSOLUTE_URI.match(href) and is_web_url(base):
        href = urljoin(base, href)
    return href if ABSOLUTE_URI.match(href) else ""


def web_uri(href: str, base: str) -> str:
    """``href`` as an absolute http(s) URL (see :mod:`roses_app.urls`), "" if it is none."""
    uri = absolute_uri(href, base)
    return uri if web_url(uri) else ""


def is_web_url(text: str) -> bool:
    return text.lower().startswith(("http://", "https://"))


def rss_author(entry: Mapping[str, Any], dropped: list[str]) -> str:
    """RSS ``author``: the first author's address, ``email (name)``, or "" when it has
    none (the names are ``dc:creator``)."""
    people = dict_list(get_field(entry, "authors"))
    if not people:
        return ""
    name = clean_text(people[0].get("name") or "").strip()
    email = clean_text(people[0].get("email") or "").strip()
    if email and not EMAIL.fullmatch(email):
        dropped.append(f"author address {email!r} is not an e-mail address: dropped")
        email = ""
    if not email:
        return ""
    return f"{email} ({name})" if name else email


# Built-in table only (not /etc/mime.types), so every machine guesses the same.
_MIME = mimetypes.MimeTypes()


def feed_link(feed: Mapping[str, Any], rel: str) -> str | None:
    """The first http(s) link of the channel with relation ``rel``."""
    for link in feed.get("links") or []:
        href = str(link.get("href") or "").strip() if isinstance(link, Mapping) else ""
        if link.get("rel") == rel and href.lower().startswith(("http://", "https://")):
            return href
    return None


def first_content(entry: Mapping[str, Any]) -> str:
    for content in dict_list(get_field(entry, "content")):
        value = clean_text(content.get("value", ""))
        if value.strip():
            return value
    return ""


def enclosure_length(value: Any) -> str:
    text = clean_text(value).strip()
    return text if text.isdigit() else "0"


def enclosure_type(value: Any, url: str) -> str:
    text = clean_text(value).strip()
    if text:
        return text
    guessed, _ = _MIME.guess_type(url, strict=False)
    return guessed or "application/octet-stream"


def micros_of_struct(value: Any) -> int | None:
    if not isinstance(value, time.struct_time) and not isinstance(value, tuple):
        return None
    try:
        micros = calendar.timegm((*tuple(value)[:6], 0, 0, 0)) * MICROS
        rfc822(micros)  # must be representable as a date
        return micros
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def published_micros(entry: Mapping[str, Any]) -> int | None:
    """The entry's publication time (else its update time) in µs, or None."""
    for key in ("published_parsed", "updated_parsed", "created_parsed"):
        micros = micros_of_struct(get_field(entry, key))
        if micros is not None:
            return micros
    return None
