"""Cutting a feed document after its first entries, before feedparser reads it.

feedparser builds a dictionary per entry of the whole document before the first one can
be taken: a 50 MB feed of 100,000 items held a parse worker at 670 MB for over three
minutes, although only the first ``fetch.max_items`` were kept.  :func:`cut_entries`
reads the document with expat, which holds nothing of what it has read, finds where
entry ``max_items + 1`` starts and returns the document up to there with the elements
still open closed again: a well-formed feed of the first ``max_items`` entries, whose
parse costs what that many entries cost.  Whatever the channel says after its entries
(rarely anything) goes with the rest.

A document expat cannot read up to the cut (not well-formed there: feedparser's lenient
parser may still recover it) is not cut; ``fetch.max_bytes`` bounds it.  Entity
expansion is bounded by expat itself (its amplification limit, expat 2.4 and later); no
external entity is read, as expat reads none unless a handler asks.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO
from xml.parsers import expat

# An entry is an RSS <item> or an Atom <entry>, child of the channel (RSS 0.9x, 2.0),
# of the feed (Atom) or of the RDF root (RSS 0.90, 1.0); names are compared without
# their prefix, as feedparser does.
_ENTRY = frozenset({"item", "entry"})
_HOLDER = frozenset({"channel", "feed", "RDF"})
_CHUNK = 1 << 20  # bytes handed to expat at once
# Encodings whose characters are written with ASCII bytes after a shift: markup cannot
# be found in their bytes without decoding them.
_STATEFUL = re.compile(rb"""encoding\s*=\s*["'](?:[^"']*2022|utf-?7)""", re.IGNORECASE)


@dataclass(frozen=True)
class Cut:
    """The document to parse, and how many entries the whole one has (None: unknown;
    when expat stopped at an error past the cut, those it counted until there).

    ``first`` is where its first entry starts, ``bounds`` where every ``chunk``-th one
    does with the closing tags the elements open there need: :meth:`parts` makes of
    them documents of ``chunk`` entries each."""

    body: bytes
    entries: int | None
    first: int | None = None
    bounds: tuple[tuple[int, bytes], ...] = ()

    def parts(self) -> Iterator[bytes]:
        """The document as well-formed documents of ``chunk`` entries each, in order,
        each with what precedes the first entry (the channel's own elements); made one
        at a time, so that only one is held beside the document."""
        if self.first is None or not self.bounds:
            yield self.body
            return
        prefix = self.body[: self.first]
        start = self.first
        for offset, closing in self.bounds:
            yield prefix + self.body[start:offset] + closing
            start = offset
        yield prefix + self.body[start:]


def cut_entries(source: bytes | BinaryIO, max_items: int, chunk: int | None = None) -> Cut:
    """The document (bytes, or a file read a megabyte at a time) up to its first
    ``max_items`` entries (all of it when it has no more), with the bounds of its parts
    of ``chunk`` entries (none: one part)."""
    stream = io.BytesIO(source) if isinstance(source, bytes) else source  # no copy

    def whole() -> bytes:
        if isinstance(source, bytes):
            return source
        stream.seek(0)
        return stream.read()

    stream.seek(0)
    start = stream.read(1024)
    if b"\x00" in start[:4]:  # UTF-16 or UTF-32: closing tags would need its encoding
        return Cut(whole(), None)
    scan = _Scan(max_items, chunk)
    try:
        scan.read(stream, encoding=None)
    # ValueError: a multi-byte encoding; LookupError: a name Python does not know
    except (expat.ExpatError, ValueError, LookupError) as exc:
        unknown = expat.errors.codes[expat.errors.XML_ERROR_UNKNOWN_ENCODING]
        if isinstance(exc, expat.ExpatError) and exc.code != unknown:
            scan.complete = False
        elif _STATEFUL.search(start):
            return Cut(whole(), None)
        else:
            # windows-1251, Shift_JIS and the like: expat knows only UTF-8/16, Latin-1
            # and ASCII, but markup is ASCII in every other encoding a feed may use (no
            # byte of a multi-byte character is an ASCII one), so reading the bytes as
            # Latin-1 finds the same elements at the same offsets.
            scan = _Scan(max_items, chunk)
            try:
                scan.read(stream, encoding="iso-8859-1")
            except expat.ExpatError:
                scan.complete = False
    bounds = tuple(scan.bounds)
    if scan.cut_at is None:  # no more entries than that, or not read that far
        if not scan.complete:
            return Cut(whole(), None)
        return Cut(whole(), scan.entries, scan.first, bounds)
    # what precedes the cut expat has read without error, whatever comes after it
    stream.seek(0)
    body = stream.read(scan.cut_at) + _closing(scan.open_at_cut)
    return Cut(body, scan.entries, scan.first, bounds)


class _Scan:
    """One expat pass: counts the entries, remembers where entry ``max_items + 1``
    starts and which elements are open there."""

    def __init__(self, max_items: int, chunk: int | None) -> None:
        self.max_items = max_items
        self.chunk = chunk
        self.first: int | None = None
        self.bounds: list[tuple[int, bytes]] = []  # (offset, closing tags) of parts
        self.entries = 0
        self.cut_at: int | None = None
        self.open_at_cut: list[str] = []
        self.complete = True  # read to the end without an error
        self._open: list[str] = []

    def read(self, stream: BinaryIO, encoding: str | None) -> None:
        parser = expat.ParserCreate(encoding)
        parser.StartElementHandler = lambda name, attrs: self._start(parser, name)
        parser.EndElementHandler = lambda name: self._open.pop()
        stream.seek(0)
        while chunk := stream.read(_CHUNK):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)

    def _start(self, parser: expat.XMLParserType, name: str) -> None:
        if _local(name) in _ENTRY and self._open and _local(self._open[-1]) in _HOLDER:
            at, seen = parser.CurrentByteIndex, self.entries
            self.entries += 1
            # closing tags are written in ASCII: an element named otherwise is no bound
            ascii_ = all(part.isascii() for part in self._open)
            if seen == 0:
                self.first = at
            elif seen == self.max_items:
                if ascii_:
                    self.cut_at, self.open_at_cut = at, list(self._open)
            elif seen < self.max_items and self.chunk and seen % self.chunk == 0 and ascii_:
                self.bounds.append((at, _closing(self._open)))
        self._open.append(name)


def _closing(names: list[str]) -> bytes:
    return "".join(f"</{name}>" for name in reversed(names)).encode("ascii")


def _local(name: str) -> str:
    return name.rpartition(":")[2]
