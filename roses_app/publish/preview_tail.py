"""The last items of the spool, read once and kept parsed, for live previews.

A preview reads the last N items of the sources an expression reads.  Reading them
again at every keystroke would cost the spool's files each time (and parsing 10,000
items a third of a second), so :class:`SpoolTail` keeps what it read: the events from
some seq on to the spool's latest, in seq order, and each item's parsed tree once a
preview needed it.  At each request it lists the spool's files: files that start after
the latest seq it holds are new (read and appended); when the sources asked for have
fewer than N items held, older files are read, newest first, until they have them or
the spool's first file is read.  Spool files never change once written (the archive
and its merged files hold the same events under other names), so what is held stays
right; a file moved while read is looked for again.

The spool is read as :func:`roses_app.spoolfiles.read_spool` reads it: without its index,
so a running daemon is not disturbed.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from roses_app.errors import SpoolError
from roses_app.items import Event
from roses_app.spoolfiles import first_seq, read_file, spool_files
from roses_app.xmlfn.presearch_fields import Reader, field_reader, irregular
from roses_app.xmlfn.presearch_terms import SEPARATOR
from roses_app.xmlfn.xpath import parse

MAX_HELD = 200_000  # events kept at most (heartbeats included): ~2x the largest preview
ATTEMPTS = 5  # listings of a spool that keeps moving files while read
WINDOWS_KEPT = 16  # windows (sources, limit) kept until the spool has more


@dataclass(frozen=True)
class Window:
    """The last ``limit`` items of some sources (and the heartbeats among them), in
    seq order; ``complete``: the spool holds no older item of them."""

    events: tuple[Event, ...]
    complete: bool
    items: int  # events with an item (the others are heartbeats)


class SpoolTail:
    """The spool's last events, kept between previews (thread-safe)."""

    def __init__(self, root: Path, max_held: int = MAX_HELD) -> None:
        self.root = Path(root)
        self.max_held = max_held
        self._events: list[Event] = []  # seq order, no gap from the first to the last
        self._complete = False  # the first event held is the spool's first
        self._parsed: dict[int, etree._Element | None] = {}  # seq -> tree (None: broken)
        # (field, lowered) -> seq -> the field's string values joined (see field_text)
        self._fields: dict[tuple[str, bool], dict[int, str | None]] = {}
        # the last windows asked: (sources, limit) -> (the latest seq then, the window)
        self._windows: dict[tuple[frozenset[str], int], tuple[int, Window]] = {}
        self._lock = threading.Lock()
        self.files_read = 0  # (for tests and benchmarks: how much a request read)

    def last(self, sources: Collection[str], limit: int) -> Window:
        """The last ``limit`` items of ``sources`` (and the heartbeats between them)."""
        with self._lock:
            for _ in range(ATTEMPTS):
                try:
                    files = spool_files(self.root)
                    self._read_newer(files)
                    self._read_older(files, sources, limit)
                    break
                except FileNotFoundError:
                    continue  # archived or merged while read: list again
            else:
                raise SpoolError(f"the spool at {self.root} kept changing while read; try again")
            key = (frozenset(sources), limit)
            latest = self._events[-1].seq if self._events else 0
            cached = self._windows.get(key)
            if cached is not None and cached[0] == latest:
                window = cached[1]
            else:
                window = self._window(sources, limit)
                if len(self._windows) >= WINDOWS_KEPT:
                    self._windows.clear()
                self._windows[key] = (latest, window)
            self._trim(window.events[0].seq if window.events else latest)
            return window

    def parsed(self, events: Sequence[Event]) -> list[etree._Element | None]:
        """Each event's item parsed (None: a heartbeat or an item that does not parse),
        each item parsed once while it is held."""
        with self._lock:
            out: list[etree._Element | None] = []
            found = self._parsed
            for event in events:
                if event.seq not in found:
                    found[event.seq] = _parsed(event.item)
                out.append(found[event.seq])
            return out

    def field_texts(self, events: Sequence[Event], field: str, lowered: bool) -> list[str | None]:
        """Each event's :func:`field_text` (None: a heartbeat, a broken or irregular
        item), each computed once while the item is held."""
        with self._lock:
            known = self._fields.setdefault((field, lowered), {})
            missing = [e for e in events if e.seq not in known]
        found: dict[int, str | None] = {}
        if missing:
            trees = self.parsed(missing)
            found = {
                e.seq: None if tree is None else field_text(tree, field, lowered)
                for e, tree in zip(missing, trees, strict=True)
            }
        with self._lock:  # (None for an item another request trimmed meanwhile: a candidate)
            known.update(found)
            return [known.get(e.seq) for e in events]

    # -- reading -------------------------------------------------------------------------

    def _read_newer(self, files: list[Path]) -> None:
        if not self._events:
            return
        latest = self._events[-1].seq
        for path in files:
            if first_seq(path) > latest:
                self.files_read += 1
                fresh = [e for e in read_file(path) if e.seq > self._events[-1].seq]
                self._events.extend(fresh)

    def _read_older(self, files: list[Path], sources: Collection[str], limit: int) -> None:
        """Older files, newest first, until ``sources`` have ``limit`` items held."""
        if self._complete:
            return
        held = sum(1 for e in self._events if e.item is not None and e.source in sources)
        while held < limit and not self._complete:
            low = self._events[0].seq if self._events else None
            older = [p for p in files if low is None or first_seq(p) < low]
            if not older:
                self._complete = True
                break
            path = max(older, key=first_seq)
            self.files_read += 1
            read = [e for e in read_file(path) if low is None or e.seq < low]
            read.sort(key=lambda e: e.seq)
            self._events[:0] = read
            held += sum(1 for e in read if e.item is not None and e.source in sources)
            files = [p for p in files if p != path]

    def _trim(self, needed: int) -> None:
        """Keep at most ``max_held`` events, the newest, but those from seq ``needed``
        on (the window just asked)."""
        extra = min(
            len(self._events) - self.max_held,
            bisect_left(self._events, needed, key=lambda e: e.seq),
        )
        if extra <= 0:
            return
        for event in self._events[:extra]:
            self._parsed.pop(event.seq, None)
            for known in self._fields.values():
                known.pop(event.seq, None)
        del self._events[:extra]
        self._complete = False

    def _window(self, sources: Collection[str], limit: int) -> Window:
        """The last ``limit`` items of ``sources`` held, with the heartbeats from the
        first of them on."""
        taken: list[Event] = []
        items = 0
        for event in reversed(self._events):
            if event.item is None:
                taken.append(event)
            elif event.source in sources:
                if items == limit:
                    break
                taken.append(event)
                items += 1
        else:
            return Window(tuple(_from_first_item(taken[::-1])), self._complete, items)
        return Window(tuple(_from_first_item(taken[::-1])), False, items)


def _from_first_item(events: list[Event]) -> list[Event]:
    """Without the heartbeats before the first item (they tell no item's time)."""
    for index, event in enumerate(events):
        if event.item is not None:
            return events[index:]
    return []


def field_text(tree: etree._Element, field: str, lowered: bool) -> str | None:
    """The string values of ``field`` (a presearch term's field: ``.``, ``title``,
    ``enclosure/@url``...) in ``tree``, as lxml and as elementpath read them (both where
    they differ), each lower-cased if ``lowered`` (``lower-case()`` is applied value by
    value), joined by the presearcher's separator; None for an item whose values the
    presearcher does not read (a node beside it, an unexpanded entity)."""
    if irregular(tree):
        return None
    reader = _readers.get(field)
    if reader is None:
        reader = _readers[field] = field_reader(field)
    values, _ = reader(tree, True)
    return SEPARATOR.join(value.lower() for value in values) if lowered else SEPARATOR.join(values)


_readers: dict[str, Reader] = {}


def _parsed(xml: str | None) -> etree._Element | None:
    if xml is None:
        return None
    try:
        return parse(xml)
    except (etree.XMLSyntaxError, ValueError):
        return None


__all__ = ["MAX_HELD", "SpoolTail", "Window"]
