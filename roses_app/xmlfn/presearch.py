"""A presearcher: which of many stored XPath observers may be true on an item.

As in Lucene's Monitor, each observer is analysed once into a *necessary condition*:
terms ``(field, lowered, text)``, one of which occurs whenever the observer is true:
``text`` is in the string value of ``field``, after ``str.lower()`` (elementpath's
``lower-case``) if ``lowered``.  ``field`` is ``.`` (the item) or a simple path
(``title``, ``{uri}creator``, ``enclosure/@url``, ``@lang``, ``title[1]``).  Terms
share one Aho-Corasick automaton per field: an item costs one scan per field, then
only the observers of the terms found are looked at (forms understood: ``_analyse``).

An *exact* observer's truth is a formula over where its terms occur (anywhere, at the
start or end of a value, as a whole value): no XPath is evaluated for it.  A leaf is
exact only where XPath cannot raise: ``contains(title, 'x')`` raises XPTY0004 on two
titles (the item is dropped) where a term would say true.

String values: ``''.join(e.itertext())`` is lxml's (the fast path's).  elementpath
skips the text after a comment or processing instruction and yields an element's tail
before its children's text: where that differs both values are scanned, and exact
observers reading that field become candidates.  An unexpanded entity reference or a
node beside the root (``<!--c--><item>``) makes every observer a candidate.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, NamedTuple, TypeVar

from ahocorasick import Automaton
from elementpath.etree import etree_iter_strings
from lxml import etree

from roses_app.xmlfn.xpath import Namespaces, compile_xpath

K = TypeVar("K")

WHOLE_ITEM = "."
# Joins the values of a multi-valued field: XML text never holds U+0000, and no term
# may contain it, so a match never spans two values.
SEPARATOR = "\x00"
FN_NAMESPACE = "http://www.w3.org/2005/xpath-functions"

# Where a term occurs, as bit flags: anywhere, at the start or end of a value, or as
# a whole value (one occurrence both starting and ending a value).
ANY, START, END, WHOLE = 1, 2, 4, 8
_STRING_TESTS = {"contains": ANY, "starts-with": START, "ends-with": END}


class Term(NamedTuple):
    """``text`` occurs in the string value of ``field`` (lower-cased if ``lowered``)."""

    field: str
    lowered: bool
    text: str


@dataclass(frozen=True)
class Leaf:
    term: Term
    anchor: int  # ANY, START, END or WHOLE


@dataclass(frozen=True)
class Gate:
    op: str  # "not" (one argument), "and" or "or" (two)
    args: tuple[Formula, ...]


Formula = Leaf | Gate | bool  # a bool: a constant


@dataclass(frozen=True)
class Condition:
    """If the observer is true, one of ``terms`` occurs; ``formula`` decides it exactly."""

    terms: frozenset[Term]
    formula: Formula | None = None

    @property
    def exact(self) -> bool:
        return self.formula is not None


# terms: None = no necessary condition; formula: None = not exact
Analysis = tuple[frozenset[Term] | None, Formula | None]
_NOTHING: Analysis = (None, None)


@dataclass(frozen=True)
class _Operand:
    key: str
    multi: bool  # may select several nodes
    wrapped: bool = False  # passed to string() or lower-case(): raises on several nodes
    lowered: bool = False


def condition(expr: str, namespaces: Namespaces = ()) -> Condition | None:
    """The necessary condition of an observer, or None: always a candidate."""
    terms, formula = analyse(expr, namespaces)
    return None if terms is None else Condition(terms, formula)


def analyse(expr: str, namespaces: Namespaces = ()) -> Analysis:
    """The terms (None: no condition) and the exact formula (None: not exact)."""
    compiled = compile_xpath(expr, namespaces)
    return _analyse(compiled.root_token, compiled.parser)


def _is_function(token: Any, name: str, arity: int) -> bool:
    return bool(token.symbol == name and token.label == "function" and len(token) == arity)


def _unprefixed(token: Any, parser: Any) -> Any:
    """``fn:contains(...)`` is a ':' token over the function: use the function itself."""
    if token.symbol != ":" or len(token) != 2 or token[1].label != "function":
        return token
    return token[1] if parser.namespaces.get(token[0].value) == FN_NAMESPACE else token


def _analyse(token: Any, parser: Any) -> Analysis:
    """Understood: ``contains``, ``starts-with``, ``ends-with`` (two arguments: the
    codepoint collation) of a field or ``lower-case(field)`` and a literal;
    ``F = 'lit'``, ``F = ('a', 'b')``, ``F eq 'lit'`` (either order); ``and``, ``or``,
    ``not``, ``boolean``, ``true``, ``false``, parentheses.  Else: no condition."""
    token = _unprefixed(token, parser)
    symbol = token.symbol
    if (symbol == "(" and len(token) == 1) or _is_function(token, "boolean", 1):
        return _analyse(token[0], parser)
    if symbol in ("and", "or") and len(token) == 2:
        left, right = _analyse(token[0], parser), _analyse(token[1], parser)
        return _junction(symbol == "and", left, right)
    if _is_function(token, "not", 1):
        formula = _analyse(token[0], parser)[1]
        return None, (None if formula is None else Gate("not", (formula,)))
    if symbol in ("true", "false") and _is_function(token, symbol, 0):
        # false() is never true: an empty set of terms, no term is needed
        return (None if symbol == "true" else frozenset()), symbol == "true"
    if symbol in _STRING_TESTS and token.label == "function" and len(token) == 2:
        return _string_test(token, parser)
    if symbol in ("=", "eq") and len(token) == 2:
        return _comparison(token, parser)
    return _NOTHING


def _junction(conjunction: bool, left: Analysis, right: Analysis) -> Analysis:
    sides = [terms for terms in (left[0], right[0]) if terms is not None]
    if conjunction:  # either side's condition is necessary: keep the one firing less
        # (fewer terms, then a longer shortest term)
        sides.sort(key=lambda ts: (len(ts), -min((len(t.text) for t in ts), default=0)))
        terms = sides[0] if sides else None
    else:
        terms = sides[0] | sides[1] if len(sides) == 2 else None
    if left[1] is None or right[1] is None:
        return terms, None
    return terms, Gate("and" if conjunction else "or", (left[1], right[1]))


def _literals(token: Any) -> list[str] | None:
    """String literals: one, or a parenthesized sequence of them."""
    if token.symbol == "(" and len(token) == 1:
        return _literals(token[0])
    if token.symbol == "," and len(token) == 2:
        left, right = _literals(token[0]), _literals(token[1])
        return None if left is None or right is None else left + right
    if token.symbol == "(string)" and SEPARATOR not in token.value:
        return [str(token.value)]
    return None


def _string_test(token: Any, parser: Any) -> Analysis:
    operand, literals = _operand(token[0], parser), _literals(token[1])
    if operand is None or literals is None or len(literals) != 1:
        return _NOTHING
    literal = literals[0]
    # with several nodes the call raises XPTY0004 (the item is dropped): not exact
    exact = not operand.multi
    if not literal:
        return None, (True if exact else None)
    term = Term(operand.key, operand.lowered, literal)
    return frozenset({term}), (Leaf(term, _STRING_TESTS[token.symbol]) if exact else None)


def _comparison(token: Any, parser: Any) -> Analysis:
    general = token.symbol == "="
    operand, literals = _operand(token[0], parser), _literals(token[1])
    if operand is None or literals is None:
        operand, literals = _operand(token[1], parser), _literals(token[0])
    if operand is None or not literals or "" in literals or (len(literals) > 1 and not general):
        return _NOTHING  # '' equals an empty value without any term; eq takes one literal
    terms = [Term(operand.key, operand.lowered, text) for text in sorted(set(literals))]
    # a general comparison of bare nodes never raises; eq, string(), lower-case() may
    if operand.multi and not (general and not operand.wrapped):
        return frozenset(terms), None
    formula: Formula = Leaf(terms[0], WHOLE)
    for term in terms[1:]:
        formula = Gate("or", (formula, Leaf(term, WHOLE)))
    return frozenset(terms), formula


def _operand(token: Any, parser: Any) -> _Operand | None:
    """A field, possibly through ``string()`` and ``lower-case()``."""
    token = _unprefixed(token, parser)
    if token.symbol == "(" and len(token) == 1:
        return _operand(token[0], parser)
    if _is_function(token, "lower-case", 1):
        inner = _operand(token[0], parser)
        if inner is None or inner.lowered:
            return None
        return replace(inner, wrapped=True, lowered=True)
    if _is_function(token, "string", 0):
        return _Operand(WHOLE_ITEM, multi=False, wrapped=True)
    if _is_function(token, "string", 1):
        inner = _operand(token[0], parser)
        return None if inner is None else replace(inner, wrapped=True)
    return _path(token, parser)


def _path(token: Any, parser: Any) -> _Operand | None:
    if token.symbol == "/" and len(token) == 2 and _steps(token[0], parser) == []:
        return _path(token[1], parser)  # ./X and $i/X are X
    first = token.symbol == "[" and len(token) == 2
    if first and not (token[1].symbol == "(integer)" and token[1].value == 1):
        return None
    steps = _steps(token[0] if first else token, parser)
    if steps is None:
        return None
    elements = [step for step in steps if not step.startswith("@")]
    if first and (not elements or len(elements) < len(steps)):
        return None
    key = "/".join(steps) or WHOLE_ITEM
    return _Operand(key + "[1]" if first else key, multi=bool(elements) and not first)


def _steps(token: Any, parser: Any) -> list[str] | None:
    """The steps of a simple path: element names, then perhaps one ``@attribute``."""
    symbol = token.symbol
    if symbol == "." or (symbol == "$" and token.value == "i"):
        return []
    if symbol == "(" and len(token) == 1:
        return _steps(token[0], parser)
    if symbol == "/" and len(token) == 2:
        left, right = _steps(token[0], parser), _steps(token[1], parser)
        if left is None or not right or any(step.startswith("@") for step in left):
            return None
        return left + right
    if symbol == "@" or (symbol == "attribute" and token.label == "axis"):
        name = _name(token[0], parser, None) if len(token) == 1 else None
        return None if name is None else ["@" + name]
    if symbol == "child" and token.label == "axis" and len(token) == 1:
        token = token[0]
    name = _name(token, parser, getattr(parser, "default_namespace", None))
    return None if name is None else [name]


def _name(token: Any, parser: Any, default: str | None) -> str | None:
    """A name test as a Clark name (``{uri}local``); no wildcards."""
    if token.symbol == "(name)":
        return f"{{{default}}}{token.value}" if default else str(token.value)
    if token.symbol == ":" and len(token) == 2 and token[1].symbol == "(name)":
        uri = parser.namespaces.get(token[0].value)
        return None if uri is None else f"{{{uri}}}{token[1].value}"
    if token.symbol == "Q{":
        value = str(token.value)
        return value[2:] if value.startswith("{}") else value
    return None


_STEP = re.compile(r"@?(?:\{[^}]*\})?[^/{}]+")
# item, unusual -> the field's string values, and whether the engines may disagree on them
Reader = Callable[[etree._Element, bool], tuple[list[str], bool]]
Check = Callable[[dict[int, int]], bool]


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


def field_reader(key: str) -> Reader:
    """The reader of the field ``key`` (see the module docstring)."""
    first = key.endswith("[1]")
    steps = [] if key == WHOLE_ITEM else _STEP.findall(key[:-3] if first else key)
    attribute = steps.pop()[1:] if steps and steps[-1].startswith("@") else None

    def read(item: etree._Element, unusual: bool) -> tuple[list[str], bool]:
        nodes = [item]
        for tag in steps:
            nodes = [child for node in nodes for child in node.iterchildren(tag)]
        if first:
            nodes = nodes[:1]
        if attribute is None:
            return _string_values(nodes, unusual)
        return [value for node in nodes if (value := node.get(attribute)) is not None], False

    return read


def irregular(item: etree._Element) -> bool:
    """A node beside the root (elementpath's document node counts a comment's text) or
    an unexpanded entity reference (lxml's XPath expands it, itertext() does not)."""
    beside = item.getprevious() is not None or item.getnext() is not None
    return beside or next(item.iter(etree.Entity), None) is not None


def _check(formula: Formula, ids: Callable[[Term], int], leaves: list[Leaf]) -> Check:
    """The formula as a function of the flags of the terms found; collects its leaves."""
    if isinstance(formula, Leaf):
        leaves.append(formula)
        tid, mask = ids(formula.term), formula.anchor
        return lambda found: bool(found.get(tid, 0) & mask)
    if isinstance(formula, bool):
        value = formula
        return lambda found: value
    checks = [_check(arg, ids, leaves) for arg in formula.args]
    if formula.op == "not":
        operand = checks[0]
        return lambda found: not operand(found)
    left, right = checks
    if formula.op == "and":
        return lambda found: left(found) and right(found)
    return lambda found: left(found) or right(found)


def _scan(automaton: Any, text: str, found: dict[int, int]) -> None:
    last, get = len(text) - 1, found.get
    for end, (tid, size, anchored) in automaton.iter(text):
        if not anchored:  # the common case: a term found has at least ANY already
            found.setdefault(tid, ANY)
            continue
        flags, start = ANY, end - size + 1
        if start == 0 or text[start - 1] == SEPARATOR:
            flags |= START
        if end == last or text[end + 1] == SEPARATOR:
            flags |= (END | WHOLE) if flags & START else END
        found[tid] = get(tid, 0) | flags


class Presearcher(Generic[K]):
    """A stored-query index over observers (XPath 3.1 expressions keyed by ``K``)."""

    def __init__(self, observers: Mapping[K, str], namespaces: Namespaces = ()) -> None:
        self._keys: list[K] = list(observers)
        self._ids: dict[Term, int] = {}
        self._anchored: set[int] = set()
        self._postings: dict[int, list[int]] = {}
        self._always: list[int] = []
        self._checks: list[Check | None] = []
        self._uses: list[frozenset[str]] = []  # the fields an exact formula reads
        for index, key in enumerate(self._keys):
            terms, formula = analyse(observers[key], namespaces)
            if terms is None:
                self._always.append(index)
            for term in terms or ():
                self._postings.setdefault(self._id(term), []).append(index)
            leaves: list[Leaf] = []
            self._checks.append(None if formula is None else _check(formula, self._id, leaves))
            self._anchored.update(self._id(leaf.term) for leaf in leaves if leaf.anchor != ANY)
            self._uses.append(frozenset(leaf.term.field for leaf in leaves))
        # without a condition: open ones are always candidates, exact ones are decided
        self._always_open = {self._keys[i] for i in self._always if self._checks[i] is None}
        self._always_exact = [i for i in self._always if self._checks[i] is not None]
        self._fields = self._automata()

    def _id(self, term: Term) -> int:
        return self._ids.setdefault(term, len(self._ids))

    def _automata(self) -> list[tuple[str, Reader, list[tuple[bool, Any]]]]:
        """Per field: its reader and one automaton per lowered/unlowered variant."""
        grouped: dict[str, dict[bool, Any]] = defaultdict(lambda: defaultdict(Automaton))
        for term, tid in self._ids.items():
            automaton = grouped[term.field][term.lowered]
            automaton.add_word(term.text, (tid, len(term.text), tid in self._anchored))
        for variants in grouped.values():
            for automaton in variants.values():
                automaton.make_automaton()
        return [(key, field_reader(key), list(v.items())) for key, v in grouped.items()]

    def _found(self, item: etree._Element) -> tuple[dict[int, int], set[str]]:
        """Term id -> where it occurs; the fields with two values (see _string_values)."""
        found: dict[int, int] = {}
        ambiguous: set[str] = set()
        unusual = _unusual(item)
        for key, read, variants in self._fields:
            values, differ = read(item, unusual)
            if differ:
                ambiguous.add(key)
            for lowered, automaton in variants if values else ():
                # lower-case() applies to one value at a time (final sigma looks around)
                texts = [value.lower() for value in values] if lowered else values
                _scan(automaton, SEPARATOR.join(texts), found)
        return found, ambiguous

    def match(self, item: etree._Element) -> tuple[set[K], set[K]]:
        """``(accepted, candidates)``: accepted observers are true without evaluating
        them; candidates must be evaluated; every other observer is false."""
        if irregular(item):
            return set(), set(self._keys)
        found, ambiguous = self._found(item)
        keys, checks, uses, postings = self._keys, self._checks, self._uses, self._postings
        hit: set[int] = set()
        for tid in found:
            hit.update(postings.get(tid, ()))
        hit.update(self._always_exact)
        accepted: set[K] = set()
        candidates = set(self._always_open)
        for index in hit:
            check = checks[index]
            if check is None or (ambiguous and not ambiguous.isdisjoint(uses[index])):
                candidates.add(keys[index])
            elif check(found):
                accepted.add(keys[index])
        return accepted, candidates

    def stats(self) -> dict[str, int]:
        """Counts for explain output."""
        return {
            "observers": len(self._keys),
            "indexed": len(self._keys) - len(self._always),
            "always_candidates": len(self._always),
            "exact": sum(check is not None for check in self._checks),
            "terms": len(self._ids),
            "fields": len(self._fields),
        }


__all__ = ["Condition", "Presearcher", "Term", "analyse", "condition", "field_reader", "irregular"]
