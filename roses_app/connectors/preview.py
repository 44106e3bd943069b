"""``roses fetch URL``: the items ROSES would make of one feed, for writing filters.

The document goes through the connector's own path, :class:`Fetcher` then
:func:`parse_feed`, with the same limits (``settings.fetch``), so what is printed
is what a source with this URL would put in the spool: each ``<item>`` (pretty
printed here; filters see the same elements) with its two times, the ingest
time ``ts`` the spool would stamp on this fetch and the item's published time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from roses_app.config.model import FetchSettings
from roses_app.connectors.fetch import Fetcher
from roses_app.connectors.xmlize import ParsedFeed, parse_feed
from roses_app.errors import FetchError
from roses_app.items import MICROS, iso8601, parse_item


@dataclass(frozen=True)
class Preview:
    url: str  # what was fetched, after redirects
    ts: int  # the ingest time (µs) the spool would give these items
    feed: ParsedFeed


def target_url(target: str) -> str:
    """An http(s) or file URL as given; anything else is a local path."""
    if target.lower().startswith(("http://", "https://", "file:")):
        return target
    return Path(target).absolute().as_uri()


def preview(
    target: str,
    settings: FetchSettings,
    *,
    base_dir: Path | None = None,
    clock: Callable[[], float] = time.time,
) -> Preview:
    """Fetch and xml-ize one feed; raises FetchError or FeedParseError as a poll would."""
    url = target_url(target)
    with Fetcher(settings, clock, base_dir=base_dir) as fetcher:
        result = fetcher.fetch(url)
    if result.gone:
        raise FetchError(f"{result.url} is gone (HTTP 410)")
    ts = int(clock() * MICROS)
    return Preview(result.url, ts, parse_feed(result.body, result.url, result.headers))


def _comment(text: str) -> str:
    return "<!-- " + text.replace("--", "- -") + " -->"


def format_preview(p: Preview) -> str:
    """Each item pretty-printed after a comment giving its times; a summary first."""
    feed = p.feed
    title = f'"{feed.title}"' if feed.title else "(untitled)"
    lines = [
        _comment(
            f"{p.url}: {title} ({feed.version or 'unknown format'}), "
            f"{len(feed.entries)} item(s); ingest ts {iso8601(p.ts)} = {p.ts} µs"
        )
    ]
    if feed.bozo:
        lines.append(_comment(f"not well-formed, recovered: {feed.bozo_message}"))
    if feed.skipped:
        lines.append(_comment(f"{feed.skipped} entries could not be written as items"))
    for n, (xml, published) in enumerate(feed.entries, start=1):
        when = "none" if published is None else f"{iso8601(published)} = {published} µs"
        lines.append(_comment(f"item {n} of {len(feed.entries)}; ts {p.ts}; published {when}"))
        pretty = etree.tostring(parse_item(xml), pretty_print=True, encoding="unicode")
        lines.append(pretty.rstrip("\n"))
    return "\n".join(lines) + "\n"
