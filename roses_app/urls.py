"""The one rule for the URLs an item carries outside its HTML, applied on the way in
(:mod:`roses_app.connectors.xmlize`) and on the way out, to every published format
(:func:`roses_app.publish.entries.item_element`, which RSS, Atom, JSON Feed and the HTML
pages all start from).

Readers follow these URLs (an item's link and comments page, its enclosures, source
feed and media) or show them as links, so they must name web resources: an absolute
http(s) URL with a host.  ``javascript:``, ``data:``, ``vbscript:`` and every other
scheme are refused, as are relative references (the connector resolves what a feed
gives against the feed first).  A category's ``domain`` names a taxonomy, which RSS 2.0
lets be a plain name (``Syndic8``): it is kept when it has no scheme at all, is a web URL,
or is an identifier (``urn:``, ``tag:``), which Atom's ``scheme`` may be too.

The HTML inside descriptions has its own, wider list of schemes (``mailto:`` links...):
:func:`roses_app.publish.sanitize.safe_url`, which reads a scheme the same way.
"""

from __future__ import annotations

import re

WEB_SCHEMES = frozenset({"http", "https"})
IDENTIFIER_SCHEMES = frozenset({"urn", "tag"})
# Browsers ignore ASCII control characters and spaces in and around a scheme.
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
_SCHEME = re.compile(r"([^/?#]*?):")
_WEB_URL = re.compile(r"https?://[^/?#\s]", re.IGNORECASE)


def scheme_of(value: str | None) -> str | None:
    """The scheme a browser would read in ``value`` (lower case, possibly not a valid
    one, as ``weird scheme``), or None when it has none: a relative reference or a name."""
    match = _SCHEME.match(_IGNORED.sub("", value or ""))
    return match.group(1).lower() if match else None


def web_url(value: str | None) -> bool:
    """True for an absolute http(s) URL naming a host, written plainly (no control
    character or space hiding its scheme)."""
    text = (value or "").strip()
    return bool(_WEB_URL.match(text)) and scheme_of(text) in WEB_SCHEMES


def taxonomy(value: str | None) -> bool:
    """True for what a category's ``domain`` may hold: a name, a web URL or an
    identifier (``urn:``, ``tag:``)."""
    scheme = scheme_of(value)
    return scheme is None or web_url(value) or scheme in IDENTIFIER_SCHEMES
