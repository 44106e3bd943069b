"""A source's recent items, read from the end of the spool.

The spool is one log of every source's items, without an index by source.  The
newest files are read backwards, at most ``budget`` bytes in all (16 MB: a few
hundred milliseconds at worst), and only lines naming the source are decoded; a source
quiet for longer than that much spool shows none, and the page says so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import orjson
from lxml import etree

from roses_app.items import Event, safe_parser
from roses_app.spoolfiles import spool_files

BUDGET = 16 * 1024 * 1024


@dataclass(frozen=True)
class Recent:
    events: list[Event]
    scanned: int  # bytes read
    complete: bool  # the whole spool was read


def recent_items(root: Path, source: str, limit: int = 20, budget: int = BUDGET) -> Recent:
    """The newest ``limit`` items of ``source`` in the spool at ``root``, newest first."""
    needle = b'"source":' + orjson.dumps(source)
    found: list[Event] = []
    seen: set[int] = set()  # a file and its merged copy give an item once
    scanned = 0
    for path in reversed(spool_files(root)):
        if len(found) >= limit or scanned >= budget:
            return Recent(found, scanned, False)
        try:
            data, whole = _tail(path, budget - scanned)
        except FileNotFoundError:  # archived or merged meanwhile: its copy is listed
            continue
        scanned += len(data)
        lines = data.split(b"\n")
        if not whole:
            lines = lines[1:]  # the first one is cut
        for line in reversed(lines):
            if needle in line:
                event = Event(**orjson.loads(line))
                if event.item is not None and event.seq not in seen:
                    seen.add(event.seq)
                    found.append(event)
                    if len(found) >= limit:
                        break
    return Recent(found, scanned, len(found) < limit)


def _tail(path: Path, most: int) -> tuple[bytes, bool]:
    """The last ``most`` bytes of a file, and whether that is all of it."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > most:
            fh.seek(size - most)
            return fh.read(most), False
        return fh.read(), True


@dataclass(frozen=True)
class Shown:
    """What a list of items shows of one."""

    title: str
    link: str | None


def shown(item: str) -> Shown:
    """An item's title and http(s) link (no other scheme is made a link)."""
    try:
        root = etree.fromstring(item.encode("utf-8"), safe_parser())
    except etree.XMLSyntaxError:
        return Shown("(an item that is not XML)", None)
    title = (root.findtext("title") or "").strip()
    link = (root.findtext("link") or "").strip()
    ok = link.lower().startswith(("http://", "https://"))
    return Shown(" ".join(title.split()), link if ok else None)
