"""An item's fields as RSS 2.0 and Atom 1.0 allow them: people, dates and URIs.

Stored items are what sources and mutators made; a published document must still be
valid (RSS 2.0, RFC 4287).  What can be written validly is rewritten to the form the
format asks (an RFC 822 ``pubDate``, an IRI percent-encoded into a URI); what cannot
(an unreadable date, a relative or malformed URI) is dropped from its field, never
invented.  The connector does the same on the way in and logs each drop with its
source (:mod:`roses_app.connectors.xmlize`); here a drop only concerns what a mutator
built, so it is logged at debug level.

* **People.** RSS ``<author>`` holds an e-mail address with a name (``a@b.org
  (Name)``); a name alone, or an address alone, is ``<dc:creator>``, and an item has one
  or the other, not both.
* **Dates.** An item without a publication date gets none.  The time ROSES received it
  is its ``updated`` time only: Atom's ``<updated>``, and ``<atom:updated>`` in RSS.
  (Not an element in ROSES's own namespace: the W3C validator warns about every
  namespace it does not know, and readers show none of them.)
* **Extensions.** What RSS 2.0 does not define and no known namespace holds is not
  published in RSS: ROSES's own elements (``roses:window``, the ``roses:related`` of a
  join, namespace ``urn:x-roses``, which is no valid URN either) and elements without a
  namespace a mutator added (``<score>``).  They stay in the store, for queries.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from email.utils import parseaddr, parsedate_to_datetime
from urllib.parse import quote

from lxml import etree

from roses_app.items import FEED_NAMESPACES, iso8601, iso_micros, micros_of, rfc822

log = logging.getLogger(__name__)

ROSES_NS = "urn:x-roses"
RSS_ITEM_ELEMENTS = frozenset(
    {"title", "link", "description", "author", "category", "comments"}
    | {"enclosure", "guid", "pubDate", "source"}
)
DC_NS = FEED_NAMESPACES["dc"]
ATOM_NS = FEED_NAMESPACES["atom"]
MEDIA_NS = FEED_NAMESPACES["media"]
ITUNES_NS = FEED_NAMESPACES["itunes"]
CREATOR = f"{{{DC_NS}}}creator"

# The address part the W3C validator (and most readers) accept: local@host.tld
_EMAIL = re.compile(
    r"[A-Za-z0-9_\-+.'!#$%&*/=?^`{|}~]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z0-9][-A-Za-z0-9]*"
)
_RSS_PERSON = re.compile(r"\s*(\S+@\S+?)\s*\((.*)\)\s*")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
# Characters a URI may hold as they are (RFC 3986 reserved and unreserved, and '%').
_URI_SAFE = ";/?:@&=+$,-_.!~*'()#%[]"
_NETWORK_SCHEMES = ("http", "https", "ftp")


@dataclass(frozen=True)
class Person:
    name: str
    email: str = ""


def parse_person(raw: str) -> Person | None:
    """``a@b.org (Name)``, ``Name <a@b.org>``, ``a@b.org`` or a name."""
    raw = " ".join(raw.split())
    if not raw:
        return None
    match = _RSS_PERSON.fullmatch(raw)
    if match and _EMAIL.fullmatch(match.group(1)):
        return Person(match.group(2).strip(), match.group(1))
    name, address = parseaddr(raw)
    if address and _EMAIL.fullmatch(address) and (name or address == raw):
        return Person(name.strip(), address)
    return Person(raw)


def people(el: etree._Element) -> list[Person]:
    """The item's authors: ``author`` and each ``dc:creator``, one entry per name."""
    out: list[Person] = []
    for raw in [el.findtext("author") or "", *(c.text or "" for c in el.findall(CREATOR))]:
        person = parse_person(raw)
        if person is None:
            continue
        same = [i for i, p in enumerate(out) if person.name and p.name == person.name]
        if same and person.email and not out[same[0]].email:
            out[same[0]] = person
        elif not same and person not in out:
            out.append(person)
    return out


def rss_people(el: etree._Element) -> None:
    """Authors the RSS way, in place: one ``<author>`` with an address, else ``dc:creator``s."""
    found = people(el)
    old = [*el.findall("author"), *el.findall(CREATOR)]
    at = el.index(old[0]) if old else len(el)
    for child in old:
        parent = child.getparent()
        if parent is not None:
            parent.remove(child)
    # an address without a name is no RSS <author>: the validator wants "a@b.org (Name)"
    if len(found) == 1 and found[0].email and found[0].name:
        person = found[0]
        author = etree.Element("author")
        author.text = f"{person.email} ({person.name})"
        el.insert(at, author)
        return
    for offset, person in enumerate(found):
        creator = etree.Element(CREATOR, nsmap={"dc": DC_NS})
        creator.text = person.name or person.email
        el.insert(at + offset, creator)


# -- URIs ------------------------------------------------------------------------------


def as_uri(text: str | None) -> str | None:
    """An absolute URI for ``text`` (an IRI is percent-encoded), or None if it is not one."""
    text = (text or "").strip()
    if not _SCHEME.match(text):
        return None
    uri = quote(text, safe=_URI_SAFE)
    scheme = uri.split(":", 1)[0].lower()
    if scheme in _NETWORK_SCHEMES and not re.match(r"[^:]+://[^/?#]", uri):
        return None
    if re.search(r"%(?![0-9A-Fa-f]{2})", uri):
        return None  # a stray '%' cannot be told from an escape
    return uri


def _drop(el: etree._Element, why: str) -> None:
    log.debug("dropped from a published item: %s", why)
    parent = el.getparent()
    if parent is not None:
        parent.remove(el)


def fix_uris(item: etree._Element) -> None:
    """Links and URL attributes as absolute URIs; what cannot be one is dropped."""
    for tag in ("link", "comments"):
        for el in item.findall(tag):
            uri = as_uri(el.text)
            if uri is None:
                _drop(el, f"<{tag}> {el.text!r} is not an absolute URI")
            else:
                el.text = uri
    media = (f"{{{MEDIA_NS}}}content", f"{{{MEDIA_NS}}}thumbnail")
    for tag in ("enclosure", "source", *media):
        for el in item.findall(tag):
            uri = as_uri(el.get("url"))
            if uri is None:
                _drop(el, f"<{tag}> has no absolute url ({el.get('url')!r})")
            else:
                el.set("url", uri)
    for guid in item.findall("guid"):
        text = (guid.text or "").strip()
        web = as_uri(text) == text and text.lower().startswith(("http://", "https://"))
        if guid.get("isPermaLink", "true") != "false" and not web:
            guid.set("isPermaLink", "false")


# -- dates -----------------------------------------------------------------------------


def parse_date(text: str | None) -> int | None:
    """RFC 822 (pubDate) or ISO 8601 (dc:date) to microseconds, None if unreadable."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return micros_of(parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError, OverflowError):
        pass
    try:
        return iso_micros(text)
    except ValueError:
        return None


def fix_dates(item: etree._Element, ingested: int) -> None:
    """``pubDate`` in RFC 822, ``dc:date``/``atom:updated`` in RFC 3339; unreadable ones
    dropped; an item with no date at all gets ``atom:updated``, when it was received."""
    for tag, write in (
        ("pubDate", rfc822),
        (f"{{{DC_NS}}}date", iso8601),
        (f"{{{ATOM_NS}}}updated", iso8601),
    ):
        for el in item.findall(tag):
            micros = parse_date(el.text)
            if micros is None:
                _drop(el, f"<{tag}> {el.text!r} is not a date")
            else:
                el.text = write(micros)
    dates = ("pubDate", f"{{{DC_NS}}}date", f"{{{ATOM_NS}}}updated")
    if all(item.find(tag) is None for tag in dates):
        updated = etree.SubElement(item, f"{{{ATOM_NS}}}updated", nsmap={"atom": ATOM_NS})
        updated.text = iso8601(ingested)


# -- iTunes ----------------------------------------------------------------------------


def _seconds(duration: str) -> int | None:
    parts = duration.strip().split(":")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    total = 0
    for part in parts:
        total = total * 60 + int(part)
    return total


def rss_without_itunes(item: etree._Element) -> None:
    """Drop iTunes elements (they make a whole RSS feed a podcast, whose channel must
    then carry elements a merged stream has no value for); an episode's duration is
    kept as the ``duration`` of a Media RSS ``content`` for its enclosure."""
    duration = item.findtext(f"{{{ITUNES_NS}}}duration") or ""
    enclosure = item.find("enclosure")
    seconds = _seconds(duration)
    media = item.find(f"{{{MEDIA_NS}}}content")
    if seconds is not None and enclosure is not None and media is None and enclosure.get("url"):
        content = etree.SubElement(item, f"{{{MEDIA_NS}}}content", nsmap={"media": MEDIA_NS})
        content.set("url", enclosure.get("url", ""))
        if enclosure.get("type"):
            content.set("type", enclosure.get("type", ""))
        length = enclosure.get("length") or ""
        if length.isdigit() and int(length) > 0:
            content.set("fileSize", length)
        content.set("duration", str(seconds))
    for el in [e for e in item if isinstance(e.tag, str) and e.tag.startswith(f"{{{ITUNES_NS}}}")]:
        item.remove(el)


def rss_one_enclosure(item: etree._Element) -> None:
    """Keep the first ``<enclosure>``: readers of RSS 2.0 take one.  The others (an Atom
    entry may have several) become Media RSS ``content`` elements, which may repeat."""
    have = {m.get("url") for m in item.findall(f"{{{MEDIA_NS}}}content")}
    for enclosure in item.findall("enclosure")[1:]:
        item.remove(enclosure)
        url = enclosure.get("url")
        if not url or url in have:
            continue
        have.add(url)
        content = etree.SubElement(item, f"{{{MEDIA_NS}}}content", nsmap={"media": MEDIA_NS})
        content.set("url", url)
        if enclosure.get("type"):
            content.set("type", enclosure.get("type", ""))
        length = enclosure.get("length") or ""
        if length.isdigit() and int(length) > 0:
            content.set("fileSize", length)


def rss_known_elements(item: etree._Element) -> None:
    """Drop ROSES's elements and un-namespaced ones RSS 2.0 does not define."""
    for child in list(item):
        if not isinstance(child.tag, str):
            continue
        name = etree.QName(child)
        if name.namespace == ROSES_NS or (
            name.namespace is None and name.localname not in RSS_ITEM_ELEMENTS
        ):
            _drop(child, f"<{name.localname}> is no RSS 2.0 element")
