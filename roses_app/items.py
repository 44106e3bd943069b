"""Items and events: the unit of data every stage exchanges.

An *item* is one serialized XML ``<item>`` element in the RSS 2.0 vocabulary
(title, link, description, content:encoded, pubDate, guid, author, category*,
enclosure*, source, then extension elements).  An *event* is an item with its
timestamps, as in the physical model of the ROSES algebra: ``[ts, item]``.

Times are integers.  For real sources they are microseconds since the Unix epoch
(UTC); in ``roses replay`` they may be abstract ticks, exactly as the event file
gives them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import quote
from xml.parsers import expat

from lxml import etree

# Namespaces that canonical items may carry (prefix -> uri).
FEED_NAMESPACES: dict[str, str] = {
    "dc": "http://purl.org/dc/elements/1.1/",
    "content": "http://purl.org/rss/1.0/modules/content/",
    "atom": "http://www.w3.org/2005/Atom",
    "media": "http://search.yahoo.com/mrss/",
    "itunes": "http://www.itunes.com/dtds/podcast-1.0.dtd",
}

MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class Event:
    """One item at one time; ``seq`` orders events that share ``ts``."""

    source: str
    ts: int
    seq: int
    item: str | None  # None: a heartbeat (time passed; it closes windows)
    published: int | None = None
    key: str = ""


def safe_parser() -> etree.XMLParser:
    """A parser that never resolves entities, loads DTDs or touches the network."""
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_blank_text=False,
    )


_PARSER = safe_parser()


def parse_item(xml: str | bytes) -> etree._Element:
    """Parse one serialized item; raises ``lxml.etree.XMLSyntaxError`` if broken."""
    data = xml.encode("utf-8") if isinstance(xml, str) else xml
    return etree.fromstring(data, _PARSER)


# Items this long or longer are checked by lxml itself: its limits without huge_tree
# (a text node of 10 MB, say) are not expat's.
_EXPAT_MAX = 1_000_000


def check_item(xml: str) -> None:
    """Raise ``lxml.etree.XMLSyntaxError`` if :func:`parse_item` cannot parse ``xml``,
    without building its tree: expat (namespaces on) decides a well-formed item in a
    third of lxml's time (a replay checks each event); lxml gives the verdict and the
    message on anything expat rejects, and decides the items with an XML declaration
    (lxml refuses encodings expat takes) or of ``_EXPAT_MAX`` characters or more."""
    if len(xml) < _EXPAT_MAX and not xml.lstrip("\ufeff").startswith("<?xml"):
        try:
            expat.ParserCreate(namespace_separator=" ").Parse(xml, True)
            return
        except (expat.ExpatError, UnicodeEncodeError):
            pass  # lxml says why
    parse_item(xml)


def serialize(element: etree._Element) -> str:
    return etree.tostring(element, encoding="unicode")


def content_hash(xml: str) -> str:
    return hashlib.sha256(xml.encode("utf-8")).hexdigest()


def item_identity(element: etree._Element) -> str:
    """The guid of an item, else its link, else '' (the caller then hashes content)."""
    for tag in ("guid", "link"):
        # the first such child, as findtext finds it, but without going through
        # ElementPath (2.5 times faster; this runs for every published row)
        for child in element.iterchildren(tag):
            text = child.text
            if text and text.strip():
                return text.strip()
            break
    return ""


def dedup_key(source: str, xml: str) -> str:
    """Spool dedup key: (source, guid or link, content hash)."""
    ident = item_identity(parse_item(xml))
    digest = hashlib.sha256()
    for part in (source, ident, content_hash(xml)):
        digest.update(part.encode("utf-8"))
        digest.update(b"\0")
    return digest.hexdigest()


def rfc822(micros: int) -> str:
    """RFC 822 date (RSS pubDate) for a time in microseconds since the epoch."""
    return format_datetime(datetime.fromtimestamp(micros / MICROS, tz=UTC), usegmt=True)


def iso8601(micros: int) -> str:
    return datetime.fromtimestamp(micros / MICROS, tz=UTC).isoformat().replace("+00:00", "Z")


def micros_of(dt: datetime) -> int:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * MICROS + delta.microseconds


def iso_micros(text: str) -> int:
    """An ISO-8601 time (``2024-05-01T12:00:00Z``; UTC when it has no offset) in µs
    since the epoch; ValueError when it is not one."""
    return micros_of(datetime.fromisoformat(text.replace("Z", "+00:00")))


# A split value's name in its feed's file names and URL, in bytes at most (its file name
# is this and an extension, and its temporary twin ``.NAME.EXT.tmp``: under the 255
# bytes of a file name on Linux filesystems, and the 143 of eCryptfs).
PART_NAME_BYTES = 120
_FILENAME_SAFE = " -_,()'+@."


def safe_filename(name: str) -> str:
    """A name as one file name: '/' and other specials %-quoted, no leading dot."""
    quoted = quote(name, safe=_FILENAME_SAFE)
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


def part_name(part: str) -> str:
    """A split value as its feed's URL and file names show it: the value itself when its
    file name fits :data:`PART_NAME_BYTES`, else the longest beginning of it that fits
    with ``~`` and 16 hex digits of the SHA-256 of the whole value.  Two long values
    that differ only at their end have two names; a value has the same one at every run.
    """
    if len(safe_filename(part)) <= PART_NAME_BYTES:  # %-quoted: its length is its bytes
        return part
    digest = "~" + hashlib.sha256(part.encode("utf-8")).hexdigest()[:16]
    budget = PART_NAME_BYTES - len(digest) - (2 if part.startswith(".") else 0)
    end = 0
    for ch in part:
        budget -= len(quote(ch, safe=_FILENAME_SAFE))
        if budget < 0:
            break
        end += 1
    return part[:end] + digest


def part_filename(part: str) -> str:
    """The file name (without extension) of split value ``part``'s feed documents."""
    return safe_filename(part_name(part))
