"""Reading field values from items and scanning them for terms (see presearch.py).

String values: ``''.join(e.itertext())`` is lxml's (the fast path's).  elementpath
skips the text after a comment or processing instruction and yields an element's tail
before its children's text: where that differs both values are scanned, and exact
observers reading that field become candidates.  An unexpanded entity reference or a
node beside the root (``<!--c--><item>``) makes every observer a candidate.

A field's terms are found by one Aho-Corasick scan of its values (lowered once if some
terms are) and a dictionary look-up per anchored term length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any, NamedTuple

from ahocorasick import Automaton
from elementpath.etree import etree_iter_strings
from lxml import etree

from roses_app.xmlfn.presearch_terms import (
    _ANCHOR_SHIFT,
    ANY,
    END,
    START,
    WHOLE,
    WHOLE_ITEM,
    Term,
)

# -- reading items ---------------------------------------------------------------------

_STEP = re.compile(r"@?(?:\{[^}]*\})?[^/{}]+")
# item, unusual -> the field's string values, and whether the engines may disagree on them
Reader = Callable[[etree._Element, bool], tuple[list[str], bool]]
_SPECIAL = (etree.Comment, etree.ProcessingInstruction, etree.Entity)


def _unusual(item: etree._Element) -> bool:
    """Whether the engines' string values may differ: elementpath skips the text after a
    comment or processing instruction, and yields an element's tail before its
    children's text (lxml and the standard: document order)."""
    if next(item.iter(etree.Comment, etree.ProcessingInstruction), None) is not None:
        return True
    return any(node.tail and len(node) for node in item.iterdescendants())


def _text(node: etree._Element) -> str:
    """lxml's string value; the text method is much faster than itertext()."""
    if len(node) == 0:  # comments and processing instructions count too
        return node.text or ""
    return etree.tostring(node, method="text", encoding=str, with_tail=False)


def _string_values(nodes: list[etree._Element], unusual: bool) -> tuple[list[str], bool]:
    """The string values as lxml gives them, plus elementpath's where they differ."""
    values = [_text(node) for node in nodes]
    if not unusual:
        return values, False
    others = ["".join(etree_iter_strings(node)) for node in nodes]
    extra = [other for other, value in zip(others, values, strict=True) if other != value]
    return values + extra, bool(extra)


def _reader(key: str) -> Callable[[etree._Element, bool], tuple[list[str], int, bool]]:
    """item, unusual -> the values of the field ``key``, how many nodes it selects, and
    whether the engines may disagree on the values (then both are there)."""
    first = key.endswith("[1]")
    steps = [] if key == WHOLE_ITEM else _STEP.findall(key[:-3] if first else key)
    attribute = steps.pop()[1:] if steps and steps[-1].startswith("@") else None

    def read(item: etree._Element, unusual: bool) -> tuple[list[str], int, bool]:
        nodes = [item]
        for tag in steps:
            nodes = [child for node in nodes for child in node.iterchildren(tag)]
        if first:
            nodes = nodes[:1]
        if attribute is None:
            values, differ = _string_values(nodes, unusual)
            return values, len(nodes), differ
        values = [value for node in nodes if (value := node.get(attribute)) is not None]
        return values, len(values), False

    return read


def field_reader(key: str) -> Reader:
    """The reader of the field ``key`` (see the module docstring)."""
    read = _reader(key)

    def values(item: etree._Element, unusual: bool) -> tuple[list[str], bool]:
        found, _, differ = read(item, unusual)
        return found, differ

    return values


def irregular(item: etree._Element) -> bool:
    """A node beside the root (elementpath's document node counts a comment's text) or
    an unexpanded entity reference (lxml's XPath expands it, itertext() does not)."""
    beside = item.getprevious() is not None or item.getnext() is not None
    return beside or next(item.iter(etree.Entity), None) is not None


# -- scanning values ---------------------------------------------------------------------

_second = itemgetter(1)


class _Anchored(NamedTuple):
    """Anchored terms by text: a prefix (by length) or suffix of a value, or a value."""

    starts: dict[str, int]
    start_sizes: tuple[int, ...]
    ends: dict[str, int]
    end_sizes: tuple[int, ...]
    wholes: dict[str, int]


# The terms of a field, lowered or not: (lowered, an Aho-Corasick automaton of the
# terms found anywhere -> their pids, or None; the anchored ones, or None)
Variant = tuple[bool, Any, _Anchored | None]


def _variant(lowered: bool, pids: dict[Term, list[int]]) -> Variant:
    """The scanner of terms (of one field and ``lowered``) -> their pids (see _pid)."""
    automaton = Automaton()
    anchored: dict[int, dict[str, int]] = {START: {}, END: {}, WHOLE: {}}
    for term, ids in pids.items():
        for pid in ids:
            anchor = pid >> _ANCHOR_SHIFT
            if anchor == ANY:
                automaton.add_word(term.text, pid)
            else:
                anchored[anchor][term.text] = pid
    if len(automaton):
        automaton.make_automaton()
    starts, ends, wholes = anchored[START], anchored[END], anchored[WHOLE]
    anchors = None
    if starts or ends or wholes:
        start_sizes = tuple(sorted({len(text) for text in starts}))
        end_sizes = tuple(sorted({len(text) for text in ends}))
        anchors = _Anchored(starts, start_sizes, ends, end_sizes, wholes)
    return lowered, automaton if len(automaton) else None, anchors


def _anchored(anchored: _Anchored, values: list[str], found: set[int]) -> None:
    """Adds the pids of the anchored terms that start, end or are one of ``values``."""
    starts, start_sizes, ends, end_sizes, wholes = anchored
    for value in values:
        pid = wholes.get(value)
        if pid is not None:
            found.add(pid)
        for size in start_sizes:
            if size > len(value):
                break
            pid = starts.get(value[:size])
            if pid is not None:
                found.add(pid)
        for size in end_sizes:
            if size > len(value):
                break
            pid = ends.get(value[-size:])
            if pid is not None:
                found.add(pid)


# A field read: (key, the child element's name if the key is one (read in one pass over
# the children), only the first such child (``title[1]``), its reader, the observers
# exact only where it has at most one value, the exact observers reading it (they are
# candidates where the engines disagree on its values), its variants)
Field = tuple[
    str,
    str | None,
    bool,
    Callable[[etree._Element, bool], tuple[list[str], int, bool]],
    frozenset[Any],
    frozenset[Any],
    tuple[Variant, ...],
]
