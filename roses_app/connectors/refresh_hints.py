"""What a feed and its HTTP response say about how often to poll them (pure, no I/O).

Part of the adaptive refresh of :mod:`roses_app.connectors.refresh`, which
re-exports :class:`Hints` and :func:`hints_from`.  A publisher can say "not more
often than" in four places, and all four are read here:

* RSS ``<ttl>`` (minutes): how long a copy may be cached;
* HTTP ``Cache-Control: max-age`` (or ``s-maxage``), else ``Expires`` minus ``Date``;
* the syndication module's ``sy:updatePeriod`` / ``sy:updateFrequency``;
* RSS ``<skipHours>`` / ``<skipDays>``: hours and days (GMT) not to poll at all.

feedparser 6 exposes ``ttl``, ``sy_updateperiod`` and ``sy_updatefrequency`` in its
``parsed.feed`` dict, but not ``skipHours`` / ``skipDays``: it flattens them into
``skiphours: ''`` plus the *last* ``hour`` / ``day`` seen.  Those two are read from
the document itself, as are the others when ``feed`` lacks them (the poller's
:class:`~roses_app.connectors.xmlize.ParsedFeed` does not carry feedparser's feed
dict, so ``hints_from({}, body, headers, now)`` works too).  The body is only
parsed when a byte search finds one of the element names in it (most feeds have
none), and then by lxml in recover mode with no entity resolution, no DTD, no
network and lxml's default size limits: a malformed or hostile document gives
empty hints, never an exception.  Junk values (``<ttl>soon</ttl>``,
``max-age=-1``, ``<hour>25</hour>``) are ignored one by one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

from lxml import etree

SY_NS = "http://purl.org/rss/1.0/modules/syndication/"

# sy:updatePeriod in seconds; a month and a year are the Gregorian averages.
UPDATE_PERIODS = {
    "hourly": 3600.0,
    "daily": 86400.0,
    "weekly": 7 * 86400.0,
    "monthly": 365.2425 / 12 * 86400.0,
    "yearly": 365.2425 * 86400.0,
}
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

# Longest header value / element text looked at: real ones are a few dozen characters.
_MAX_TEXT = 4096
_NUMBER = re.compile(r"\d{1,12}(?:\.\d{1,6})?")
_INTEGER = re.compile(r"\d{1,12}")
# One Cache-Control directive: a name, optionally "=" and a token or a quoted string.
_DIRECTIVE = re.compile(r'\s*([^\s=,"]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^,]*))?\s*(?:,|$)')


def _markers(*words: str) -> tuple[bytes, ...]:
    """The words as bytes in UTF-8 and UTF-16 (whose big-endian form contains the
    little-endian one one byte later): a document without any is never parsed."""
    return tuple(word.encode(enc) for word in words for enc in ("utf-8", "utf-16-le"))


_SKIP_MARKERS = _markers("skipHours", "skipDays")
_ALL_MARKERS = (*_SKIP_MARKERS, *_markers("<ttl", "updatePeriod", "updateFrequency"))


@dataclass(frozen=True)
class Hints:
    """The publisher's wishes, in seconds (``None``: not said, or said in junk)."""

    ttl: float | None = None  # RSS <ttl>, given in minutes
    max_age: float | None = None  # Cache-Control max-age / s-maxage, else Expires - Date
    update_period: float | None = None  # sy:updatePeriod / sy:updateFrequency
    skip_hours: frozenset[int] = frozenset()  # RSS <skipHours>: hours 0..23, GMT
    skip_days: frozenset[int] = frozenset()  # RSS <skipDays>: 0 = Monday .. 6 = Sunday


@dataclass(frozen=True)
class _Channel:
    """The channel-level texts found in the document (``None``: absent)."""

    ttl: str | None = None
    period: str | None = None
    frequency: str | None = None
    hours: tuple[str, ...] = ()
    days: tuple[str, ...] = ()


def hints_from(
    feed: Mapping[str, Any], body: bytes, headers: Mapping[str, str], now: float
) -> Hints:
    """The hints of one successful poll: ``feed`` is feedparser's ``parsed.feed`` (or
    ``{}``), ``headers`` the response's with lower-case names, ``now`` the clock's
    time (stands in for a missing ``Date``).  Never raises."""
    feed = feed if isinstance(feed, Mapping) else {}
    ttl_text = _text(feed.get("ttl"))
    period_text = _text(feed.get("sy_updateperiod"))
    frequency_text = _text(feed.get("sy_updatefrequency"))
    needed = _SKIP_MARKERS if ttl_text and (period_text or frequency_text) else _ALL_MARKERS
    channel = _channel(body, needed)
    if ttl_text is None:
        ttl_text = channel.ttl
    if period_text is None and frequency_text is None:
        period_text, frequency_text = channel.period, channel.frequency
    minutes = _positive(ttl_text)
    return Hints(
        ttl=None if minutes is None else minutes * 60.0,
        max_age=http_max_age(headers, now),
        update_period=update_period(period_text, frequency_text),
        skip_hours=skip_hours(channel.hours),
        skip_days=skip_days(channel.days),
    )


# -- values ----------------------------------------------------------------------------


def _text(value: object) -> str | None:
    """A feedparser value as text (it gives strings; anything else is junk)."""
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _positive(text: str | None) -> float | None:
    """A plain decimal number > 0 (no signs, exponents, ``inf`` or ``nan``)."""
    if text is None or not _NUMBER.fullmatch(text.strip()):
        return None
    value = float(text.strip())
    return value if 0 < value < math.inf else None


def update_period(period: str | None, frequency: str | None) -> float | None:
    """``sy:updatePeriod`` divided by ``sy:updateFrequency``, in seconds.

    The module's defaults apply to a missing half (daily, once); a junk period voids
    the hint (we do not know the unit), a junk frequency counts as once."""
    if period is None and frequency is None:
        return None
    seconds = UPDATE_PERIODS.get((period or "daily").strip().lower())
    if seconds is None:
        return None
    times = 1
    if frequency is not None and _INTEGER.fullmatch(frequency.strip()):
        times = max(1, int(frequency.strip()))
    return seconds / times


def http_max_age(headers: Mapping[str, str], now: float) -> float | None:
    """The response's freshness lifetime in seconds, as RFC 9111 computes it.

    ``no-store`` or an unqualified ``no-cache`` ask to revalidate every time, which
    is no hint about a rate, so ``None``; so is a lifetime of zero or less."""
    cache_control = headers.get("cache-control")
    if isinstance(cache_control, str):
        directives = cache_directives(cache_control)
        if "no-store" in directives or directives.get("no-cache", "x") is None:
            return None
        for name in ("max-age", "s-maxage"):
            value = directives.get(name)
            if value is not None:
                seconds = _delta_seconds(value)
                if seconds is not None:
                    return seconds if seconds > 0 else None
    return _expires_lifetime(headers, now)


def cache_directives(value: str) -> dict[str, str | None]:
    """``Cache-Control`` directives by lower-case name, the first of each name kept
    (RFC 9111 4.2.1); a quoted value is unquoted, a name alone maps to ``None``."""
    directives: dict[str, str | None] = {}
    for match in _DIRECTIVE.finditer(value[:_MAX_TEXT]):
        name, raw = match.group(1).lower(), match.group(2)
        if raw is not None:
            raw = raw.strip()
            if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        directives.setdefault(name, raw)
    return directives


def _delta_seconds(value: str) -> float | None:
    return float(value) if _INTEGER.fullmatch(value.strip()) else None


def _expires_lifetime(headers: Mapping[str, str], now: float) -> float | None:
    """``Expires`` minus ``Date`` (``now`` when the response has no valid ``Date``)."""
    expires = _http_date(headers.get("expires"))
    if expires is None:
        return None
    date = _http_date(headers.get("date"))
    start = date if date is not None else now
    lifetime = expires - start
    return lifetime if 0 < lifetime < math.inf else None


def _http_date(value: object) -> float | None:
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        when = parsedate_to_datetime(value[:_MAX_TEXT])
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        when = when.replace(tzinfo=UTC)
    try:
        return when.timestamp()
    except (OverflowError, ValueError, OSError):
        return None


def skip_hours(texts: Iterable[str]) -> frozenset[int]:
    """``<hour>`` values 0..23 (24, which RSS 0.91 used for midnight, is 0)."""
    hours = set()
    for text in texts:
        if _INTEGER.fullmatch(text.strip()) and int(text.strip()) <= 24:
            hours.add(int(text.strip()) % 24)
    return frozenset(hours)


def skip_days(texts: Iterable[str]) -> frozenset[int]:
    """``<day>`` names (any case), Monday = 0."""
    return frozenset(DAYS.index(t.strip().lower()) for t in texts if t.strip().lower() in DAYS)


# -- the document ----------------------------------------------------------------------


def _channel(body: bytes, markers: tuple[bytes, ...]) -> _Channel:
    """The channel-level elements, read only when one of ``markers`` is in ``body``."""
    if not isinstance(body, bytes) or not body:
        return _Channel()
    if not any(marker in body for marker in markers):
        return _Channel()
    root = _parse(body)
    return _Channel() if root is None else _read_channel(root)


def _parse(body: bytes) -> Any:
    """The document's root, or ``None``: recover mode, nothing resolved or fetched."""
    parser = etree.XMLParser(
        recover=True,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    try:
        return etree.fromstring(body, parser)
    except Exception:  # lxml raises XMLSyntaxError, ValueError, ... on junk
        return None


def _read_channel(root: Any) -> _Channel:
    """Direct children of the RSS ``channel`` (or Atom ``feed``, for ``sy:``) only."""
    found: dict[str, list[str]] = {"ttl": [], "period": [], "frequency": []}
    hours: list[str] = []
    days: list[str] = []
    for parent in _channels(root):
        for child in parent:
            tag = child.tag if isinstance(child.tag, str) else ""
            if tag == "ttl":
                found["ttl"].append(child.text or "")
            elif tag == f"{{{SY_NS}}}updatePeriod":
                found["period"].append(child.text or "")
            elif tag == f"{{{SY_NS}}}updateFrequency":
                found["frequency"].append(child.text or "")
            elif tag == "skipHours":
                hours.extend(_texts(child, "hour"))
            elif tag == "skipDays":
                days.extend(_texts(child, "day"))
    first = {key: values[0][:_MAX_TEXT] if values else None for key, values in found.items()}
    return _Channel(first["ttl"], first["period"], first["frequency"], tuple(hours), tuple(days))


def _channels(root: Any) -> list[Any]:
    """The elements named ``channel`` (any namespace) or ``feed`` at depth 0 or 1."""
    candidates = [root, *(child for child in root if isinstance(child.tag, str))]
    return [
        element
        for element in candidates
        if isinstance(element.tag, str) and etree.QName(element).localname in ("channel", "feed")
    ]


def _texts(element: Any, tag: str) -> list[str]:
    """The texts of ``element``'s direct ``tag`` children (at most 48 of them)."""
    return [(child.text or "")[:_MAX_TEXT] for child in element.findall(tag)[:48]]
