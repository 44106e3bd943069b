"""A presearcher: which of many stored XPath observers may be true on an item.

As in Lucene's Monitor, each observer is analysed once into a *necessary condition*,
in conjunctive form: up to ``MAX_CLAUSES`` clauses of terms ``(field, lowered, text)``,
each clause with a term that occurs whenever the observer is true.  A term occurs if
``text`` is in the string value of ``field``, after ``str.lower()`` (elementpath's
``lower-case``) if ``lowered``.  ``field`` is ``.`` (the item) or a simple path
(``title``, ``{uri}creator``, ``enclosure/@url``, ``@lang``, ``title[1]``).

An *exact* observer's truth is a formula over where its terms occur (anywhere, at the
start or end of a value, as a whole value): no XPath is evaluated for it.  A leaf
that reads a field which may select several nodes (``contains(title, 'x')``,
``lower-case(title) = 'x'``, ``title eq 'x'``) raises XPTY0004 on two titles (the
item is dropped): it is exact only on the items where the field has at most one
value (none is the empty sequence: ``contains((), 'x')`` is false, ``() eq 'x'`` is
empty, ``lower-case(())`` is ``''``); on the others, such an observer is a candidate
if its terms are found (if it evaluates to true, it raised on no leaf, so every leaf
it evaluated was exact).

Matching an item costs, per field read (the children in one pass), one Aho-Corasick
scan of its values (lowered once if some terms are) and a dictionary look-up per
anchored term length; then set operations over postings (pid -> observer keys)
grouped by mode and number of clauses: an exact observer whose formula is a
conjunction of positive clauses and negated terms (in conjunctive normal form) is
decided without any Python work of its own; other exact formulas are small closures,
run for the observers whose condition holds.

String values: ``''.join(e.itertext())`` is lxml's (the fast path's).  elementpath
skips the text after a comment or processing instruction and yields an element's tail
before its children's text: where that differs both values are scanned, and exact
observers reading that field become candidates.  An unexpanded entity reference or a
node beside the root (``<!--c--><item>``) makes every observer a candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from itertools import product
from operator import itemgetter
from typing import Any, Generic, NamedTuple, TypeVar

from ahocorasick import Automaton
from elementpath.etree import etree_iter_strings
from lxml import etree

from roses_app.xmlfn.xpath import Namespaces, compile_xpath

K = TypeVar("K", bound=Hashable)

WHOLE_ITEM = "."
# Joins the values of a multi-valued field: XML text never holds U+0000, and no term
# may contain it, so a match never spans two values.
SEPARATOR = "\x00"
FN_NAMESPACE = "http://www.w3.org/2005/xpath-functions"
MAX_CLAUSES = 3  # clauses of a necessary condition (an exact formula may have as many)
NEST_MIN = 16  # observers sharing a pid from which two-clause ones are nested under it
FEW = 8  # observers below which each is checked rather than a posting looked up per pid
MAX_CNF = 16  # clauses of an exact formula in conjunctive form; more: run as a closure

# Where a term occurs, as bit flags: anywhere, at the start or end of a value, or as
# a whole value (one occurrence both starting and ending a value).
ANY, START, END, WHOLE = 1, 2, 4, 8
# A term id and an anchor as one int, a "pid": the anchor in the high bits, so that
# the pids of a set of terms hash to different slots of a set's table.
_ANCHOR_SHIFT = 32
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
    # exact only on items where the field has at most one value (else XPTY0004); an
    # empty text is always found (``contains(title, '')``)
    single: bool = False


@dataclass(frozen=True)
class Gate:
    op: str  # "not" (one argument), "and" or "or" (two)
    args: tuple[Formula, ...]


Formula = Leaf | Gate | bool  # a bool: a constant
Clauses = tuple[frozenset[Term], ...]  # a conjunction of disjunctions; () is no condition


def leaves(formula: Formula | None) -> list[Leaf]:
    if formula is None or isinstance(formula, bool):
        return []
    if isinstance(formula, Leaf):
        return [formula]
    return [leaf for arg in formula.args for leaf in leaves(arg)]


def single_fields(formula: Formula | None) -> frozenset[str]:
    """The fields a formula is exact on only where they have at most one value."""
    return frozenset(leaf.term.field for leaf in leaves(formula) if leaf.single)


@dataclass(frozen=True)
class Condition:
    """If the observer is true, one of ``terms`` occurs, and one term of each of
    ``clauses`` (``terms`` is the first); ``formula`` decides it (see ``singles``)."""

    terms: frozenset[Term]
    formula: Formula | None = None
    clauses: Clauses = ()

    @property
    def singles(self) -> frozenset[str]:
        """The fields ``formula`` is exact on only where they have at most one value."""
        return single_fields(self.formula)

    @property
    def exact(self) -> bool:
        """Exact on every item."""
        return self.formula is not None and not self.singles


# terms: None = no necessary condition; formula: None = not exact (exact only where
# the fields of single_fields(formula) have at most one value)
Analysis = tuple[frozenset[Term] | None, Formula | None]


class _Analysis(NamedTuple):
    clauses: Clauses  # (): no condition; (frozenset(),): never true
    formula: Formula | None  # None: not exact (see Analysis)


_NOTHING = _Analysis((), None)
_NEVER: Clauses = (frozenset(),)


@dataclass(frozen=True)
class _Operand:
    key: str
    multi: bool  # may select several nodes
    wrapped: bool = False  # passed to string() or lower-case(): raises on several nodes
    lowered: bool = False


def condition(expr: str, namespaces: Namespaces = ()) -> Condition | None:
    """The necessary condition of an observer, or None: always a candidate."""
    found = _analyse_expr(expr, namespaces)
    if not found.clauses:
        return None
    return Condition(found.clauses[0], found.formula, found.clauses)


def analyse(expr: str, namespaces: Namespaces = ()) -> Analysis:
    """The terms (None: no condition) and the formula (None: not exact)."""
    found = _analyse_expr(expr, namespaces)
    return (found.clauses[0] if found.clauses else None), found.formula


def _analyse_expr(expr: str, namespaces: Namespaces) -> _Analysis:
    compiled = compile_xpath(expr, namespaces)
    return _analyse(compiled.root_token, compiled.parser)


def _is_function(token: Any, name: str, arity: int) -> bool:
    return bool(token.symbol == name and token.label == "function" and len(token) == arity)


def _unprefixed(token: Any, parser: Any) -> Any:
    """``fn:contains(...)`` is a ':' token over the function: use the function itself."""
    if token.symbol != ":" or len(token) != 2 or token[1].label != "function":
        return token
    return token[1] if parser.namespaces.get(token[0].value) == FN_NAMESPACE else token


def _analyse(token: Any, parser: Any) -> _Analysis:
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
        formula = _analyse(token[0], parser).formula
        return _Analysis((), None if formula is None else Gate("not", (formula,)))
    if symbol in ("true", "false") and _is_function(token, symbol, 0):
        return _Analysis(() if symbol == "true" else _NEVER, symbol == "true")
    if symbol in _STRING_TESTS and token.label == "function" and len(token) == 2:
        return _string_test(token, parser)
    if symbol in ("=", "eq") and len(token) == 2:
        return _comparison(token, parser)
    return _NOTHING


def _selectivity(clause: frozenset[Term]) -> tuple[int, int, list[Term]]:
    """Fewer terms, then a longer shortest term, fire less (then: any fixed order)."""
    return len(clause), -min((len(t.text) for t in clause), default=0), sorted(clause)


def _best(clauses: list[frozenset[Term]]) -> Clauses:
    """The ``MAX_CLAUSES`` most selective clauses, none implied by another."""
    if any(not clause for clause in clauses):
        return _NEVER
    kept: list[frozenset[Term]] = []
    for clause in sorted(set(clauses), key=_selectivity):
        if not any(other <= clause for other in kept):
            kept.append(clause)
    return tuple(kept[:MAX_CLAUSES])


def _junction(conjunction: bool, left: _Analysis, right: _Analysis) -> _Analysis:
    if conjunction:  # both sides' conditions are necessary
        clauses = _best([*left.clauses, *right.clauses])
    elif left.clauses and right.clauses:  # one side's: a clause of each, joined
        clauses = _best([a | b for a, b in product(left.clauses, right.clauses)])
    else:
        clauses = ()
    if left.formula is None or right.formula is None:
        return _Analysis(clauses, None)
    return _Analysis(clauses, Gate("and" if conjunction else "or", (left.formula, right.formula)))


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


def _string_test(token: Any, parser: Any) -> _Analysis:
    operand, literals = _operand(token[0], parser), _literals(token[1])
    if operand is None or literals is None or len(literals) != 1:
        return _NOTHING
    term = Term(operand.key, operand.lowered, literals[0])
    # with several nodes the call raises XPTY0004 (the item is dropped); with none,
    # the argument is () and the test is that of '' (true only for an empty literal)
    leaf = Leaf(term, _STRING_TESTS[token.symbol], single=operand.multi)
    if not term.text:
        return _Analysis((), leaf if operand.multi else True)
    return _Analysis((frozenset({term}),), leaf)


def _comparison(token: Any, parser: Any) -> _Analysis:
    general = token.symbol == "="
    operand, literals = _operand(token[0], parser), _literals(token[1])
    if operand is None or literals is None:
        operand, literals = _operand(token[1], parser), _literals(token[0])
    if operand is None or not literals or "" in literals or (len(literals) > 1 and not general):
        return _NOTHING  # '' equals an empty value without any term; eq takes one literal
    terms = [Term(operand.key, operand.lowered, text) for text in sorted(set(literals))]
    # a general comparison of bare nodes never raises; eq, string(), lower-case() raise
    # on several nodes; on none, '' (string(), lower-case()) or () (eq) equals no literal
    single = operand.multi and not (general and not operand.wrapped)
    formula: Formula = Leaf(terms[0], WHOLE, single)
    for term in terms[1:]:
        formula = Gate("or", (formula, Leaf(term, WHOLE, single)))
    return _Analysis((frozenset(terms),), formula)


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


# -- compiling observers -------------------------------------------------------------------

Literal = tuple[int, bool]  # a term's pid (see Presearcher._pid), and not negated
Check = Callable[[set[int]], bool]
EXACT, CHECK, OPEN = 0, 1, 2  # decided by sets / by a closure / a candidate if it holds


def _cnf(
    formula: Formula, pid: Callable[[Leaf], int], positive: bool = True
) -> list[frozenset[Literal]] | None:
    """The formula (negated unless ``positive``) as a conjunction of clauses, or None if
    that has more than ``MAX_CNF`` clauses.  An empty list is true, an empty clause false."""
    if isinstance(formula, bool) or (isinstance(formula, Leaf) and not formula.term.text):
        return [] if (formula is not False) is positive else [frozenset()]
    if isinstance(formula, Leaf):
        return [frozenset({(pid(formula), positive)})]
    if formula.op == "not":
        return _cnf(formula.args[0], pid, not positive)
    left, right = (_cnf(arg, pid, positive) for arg in formula.args)
    if left is None or right is None:
        return None
    if (formula.op == "and") is positive:
        clauses = left + right
    elif len(left) * len(right) > MAX_CNF:
        return None
    else:
        clauses = [a | b for a in left for b in right]
    # without tautologies, duplicates, and clauses implied by others
    kept: list[frozenset[Literal]] = []
    for clause in sorted(set(clauses), key=len):
        tautology = any((p, not s) in clause for p, s in clause)
        if not tautology and not any(other <= clause for other in kept):
            kept.append(clause)
    return None if len(kept) > MAX_CNF else kept


def _closure(formula: Formula, pid: Callable[[Leaf], int]) -> Check:
    """The formula as a function of the ids of the terms found."""
    if isinstance(formula, bool) or (isinstance(formula, Leaf) and not formula.term.text):
        value = formula is not False
        return lambda found: value
    if isinstance(formula, Leaf):
        term = pid(formula)
        return lambda found: term in found
    checks = [_closure(arg, pid) for arg in formula.args]
    if formula.op == "not":
        operand = checks[0]
        return lambda found: not operand(found)
    left, right = checks
    if formula.op == "and":
        return lambda found: left(found) and right(found)
    return lambda found: left(found) or right(found)


@dataclass
class _Plan(Generic[K]):
    key: K
    mode: int
    clauses: list[frozenset[int]]  # positive, each with a found pid if the observer holds
    negated: frozenset[int]  # EXACT: true if no pid of these is found
    check: Check | None = None  # CHECK: the formula
    formula: Formula | None = None


Postings = dict[int, frozenset[Any]]  # pid -> observer keys


class _Group(NamedTuple):
    """Observers of one mode and number of clauses, and with negated pids or not.

    Flat: slot i holds their i-th clauses.  Nested (two clauses, one a pid shared by
    many observers, e.g. ``category = 'c'``): that pid -> the other clause's pids ->
    observers; an item costs a look-up per pid found and shared pid found, instead of
    an element per observer whose first clause holds."""

    mode: int
    slots: tuple[Postings, ...]
    nested: dict[int, Postings] | None
    clauses_by: dict[Any, list[frozenset[int]]]  # flat, two clauses or more: by observer
    negated: Postings | None  # EXACT: the pids that make them false
    negated_by: dict[Any, frozenset[int]]  # those pids by observer
    everyone: frozenset[Any]  # with no clause


def _postings(found: set[int], postings: Postings) -> list[frozenset[Any]]:
    """The postings of the pids found: a look-up per pid found or per pid indexed."""
    if len(postings) < len(found):
        return list(map(postings.__getitem__, found.intersection(postings)))
    return list(filter(None, map(postings.get, found)))


def _union(sets: list[frozenset[K]]) -> frozenset[K] | set[K]:
    return sets[0] if len(sets) == 1 else set().union(*sets)


class Presearcher(Generic[K]):
    """A stored-query index over observers (XPath 3.1 expressions keyed by ``K``)."""

    def __init__(self, observers: Mapping[K, str], namespaces: Namespaces = ()) -> None:
        self._keys: list[K] = list(observers)
        self._ids: dict[Term, int] = {}
        self._checks: dict[K, Check] = {}
        plans = [self._plan(key, _analyse_expr(observers[key], namespaces)) for key in self._keys]
        self._plans = [plan for plan in plans if plan is not None]
        self._groups = self._index(self._plans)
        self._fields = self._scanners(self._plans)
        self._tags = {field[1] for field in self._fields if field[1] is not None}
        self._few = FEW

    def _pid(self, term: Term, anchor: int = ANY) -> int:
        """A term and an anchor as one int: where this anchor holds, it is found."""
        return anchor << _ANCHOR_SHIFT | self._ids.setdefault(term, len(self._ids))

    def _leaf_pid(self, leaf: Leaf) -> int:
        return self._pid(leaf.term, leaf.anchor)

    def _plan(self, key: K, found: _Analysis) -> _Plan[K] | None:
        """How to decide the observer (None: never true)."""
        necessary = [frozenset(map(self._pid, clause)) for clause in found.clauses]
        if frozenset() in necessary:
            return None
        formula = found.formula
        if formula is None:
            return _Plan(key, OPEN, necessary, frozenset())
        cnf = _cnf(formula, self._leaf_pid)
        if cnf is not None and frozenset() in cnf:
            return None
        clauses = [] if cnf is None else [c for c in cnf if all(s for _, s in c)]
        negated = [] if cnf is None else [c for c in cnf if len(c) == 1 and not next(iter(c))[1]]
        flat = cnf is not None and len(clauses) + len(negated) == len(cnf)
        if flat and len(clauses) <= MAX_CLAUSES:
            pos = [frozenset(p for p, _ in clause) for clause in clauses]
            neg = frozenset(p for clause in negated for p, _ in clause)
            return _Plan(key, EXACT, pos, neg, formula=formula)
        # the formula's positive clauses are necessary too (see the module docstring)
        pos = list({*necessary, *(frozenset(p for p, _ in clause) for clause in clauses)})
        check = _closure(formula, self._leaf_pid)
        return _Plan(key, CHECK, pos, frozenset(), check, formula)

    def _index(self, plans: list[_Plan[K]]) -> list[_Group]:
        """Groups by mode, number of clauses and negation.  In each observer, the clauses
        on the fewest observers first (no statistics of the items: shared terms are taken
        for frequent ones); two-clause observers with a one-pid clause shared by
        ``NEST_MIN`` or more are nested under that pid (see _Group)."""
        usage: dict[int, int] = {}
        for plan in plans:
            for clause in plan.clauses:
                for pid in clause:
                    usage[pid] = usage.get(pid, 0) + 1
        grouped: dict[tuple[int, int, bool], list[_Plan[K]]] = {}
        for plan in plans:
            plan.clauses.sort(key=lambda clause: (sum(usage[p] for p in clause), sorted(clause)))
            if plan.mode != EXACT:
                del plan.clauses[MAX_CLAUSES:]
            if plan.check is not None:
                self._checks[plan.key] = plan.check
            size = len(plan.clauses)
            if size == 2:
                shared = [c for c in plan.clauses if len(c) == 1 and usage[min(c)] >= NEST_MIN]
                if shared:  # nested: the shared pid first
                    plan.clauses.sort(key=lambda clause: clause is not shared[-1])
                    size = -1
            grouped.setdefault((plan.mode, size, bool(plan.negated)), []).append(plan)
        groups = []
        for (mode, size, _), members in sorted(grouped.items()):
            nested = None
            if size < 0:
                inner: dict[int, list[tuple[K, frozenset[int]]]] = {}
                for m in members:
                    inner.setdefault(min(m.clauses[0]), []).append((m.key, m.clauses[1]))
                nested = {pid: _slot(others) for pid, others in inner.items()}
            slots = tuple(_slot([(m.key, m.clauses[i]) for m in members]) for i in range(size))
            negated = _slot([(m.key, m.negated) for m in members])
            clauses_by = {m.key: m.clauses for m in members} if size > 1 else {}
            negated_by = {m.key: m.negated for m in members if m.negated}
            everyone = frozenset(m.key for m in members) if not size else frozenset()
            group = _Group(mode, slots, nested, clauses_by, negated or None, negated_by, everyone)
            groups.append(group)
        return groups

    def _scanners(self, plans: list[_Plan[K]]) -> list[Field]:
        """Per field read: its reader and scanners, and who depends on its values."""
        used = {pid for plan in plans for clause in plan.clauses for pid in clause}
        used.update(pid for plan in plans for pid in plan.negated)
        singles: dict[str, set[K]] = {}
        uses: dict[str, set[K]] = {}
        for plan in plans:
            for leaf in leaves(plan.formula):
                uses.setdefault(leaf.term.field, set()).add(plan.key)
                if leaf.single:
                    singles.setdefault(leaf.term.field, set()).add(plan.key)
                if plan.mode == CHECK and leaf.term.text:
                    used.add(self._leaf_pid(leaf))
        terms: dict[tuple[str, bool], dict[Term, list[int]]] = {}
        for term, tid in self._ids.items():
            pids = [anchor << _ANCHOR_SHIFT | tid for anchor in (ANY, START, END, WHOLE)]
            pids = [pid for pid in pids if pid in used]
            if pids:
                terms.setdefault((term.field, term.lowered), {})[term] = pids
        keys = sorted({*singles, *uses, *(field for field, _ in terms)})
        fields = []
        for key in keys:
            variants = tuple(
                _variant(lowered, terms[key, lowered])
                for lowered in (False, True)
                if (key, lowered) in terms
            )
            simple = key != WHOLE_ITEM and "/" not in key and "@" not in key
            tag = (key[:-3] if key.endswith("[1]") else key) if simple else None
            fields.append(
                (
                    key,
                    tag,
                    key.endswith("[1]"),
                    _reader(key),
                    frozenset(singles.get(key, ())),
                    frozenset(uses.get(key, ())),
                    variants,
                )
            )
        return fields

    def _children(self, item: etree._Element) -> dict[str, list[str]] | None:
        """The values of the child elements read, in one pass; None if a child has
        children (then elementpath's values may differ: see _unusual)."""
        tags = self._tags
        values: dict[str, list[str]] = {}
        for child in item:
            if len(child):
                return None
            tag = child.tag
            if tag in tags:
                text = child.text or ""
                if tag in values:
                    values[tag].append(text)
                else:
                    values[tag] = [text]
        return values

    def _found(self, item: etree._Element) -> tuple[set[int], list[frozenset[K]]] | None:
        """The pids found, and the observers not exact on this item (sets of keys);
        None if the item is irregular."""
        if item.getprevious() is not None or item.getnext() is not None:
            return None
        special = next(item.iter(*_SPECIAL), None)
        if special is not None and next(item.iter(etree.Entity), None) is not None:
            return None
        children = self._children(item) if special is None else None
        unusual = children is None and _unusual(item)
        found: set[int] = set()
        blocked: list[frozenset[K]] = []
        for key, tag, first, read, singles, uses, variants in self._fields:
            if children is None:
                values, count, differ = read(item, unusual)
                if differ and uses:
                    blocked.append(uses)
            elif tag is not None:
                values = children.get(tag, [])
                if first:
                    values = values[:1]
                count = len(values)
            elif key == WHOLE_ITEM:
                values, count = [_text(item)], 1
            else:
                values, count, _ = read(item, False)
            if count > 1 and singles:
                blocked.append(singles)
            if not values:
                continue
            lowered_values = None
            for lowered, automaton, anchored in variants:
                texts = values
                if lowered:
                    # lower-case() applies to one value at a time (final sigma looks around)
                    texts = lowered_values = lowered_values or [value.lower() for value in values]
                if automaton is not None:
                    text = texts[0] if len(texts) == 1 else SEPARATOR.join(texts)
                    found.update(map(_second, automaton.iter(text)))
                if anchored is not None:
                    _anchored(anchored, texts, found)
        return found, blocked

    def match(self, item: etree._Element) -> tuple[set[K], set[K]]:
        """``(accepted, candidates)``: accepted observers are true without evaluating
        them; candidates must be evaluated; every other observer is false."""
        scanned = self._found(item)
        if scanned is None:
            return set(), set(self._keys)
        found, blocked = scanned
        few = self._few
        accepted: set[K] = set()
        candidates: set[K] = set()
        for mode, slots, nested, clauses_by, negated, negated_by, everyone in self._groups:
            hit: frozenset[K] | set[K] | list[K] = everyone
            if nested is not None:
                hit = set()
                for pid in found.intersection(nested):
                    sets = _postings(found, nested[pid])
                    if sets:
                        hit.update(*sets)
                if not hit:
                    continue
            elif slots:
                sets = _postings(found, slots[0])
                if not sets:
                    continue
                if mode == EXACT and len(slots) == 1 and negated is None and not blocked:
                    accepted.update(*sets)  # the common case: no set built but the result
                    continue
                hit = _union(sets)
                for i in range(1, len(slots)):
                    if len(hit) <= few:  # each one's other clauses: fewer look-ups
                        isdisjoint = found.isdisjoint
                        hit = [k for k in hit if not any(map(isdisjoint, clauses_by[k][i:]))]
                        break
                    sets = _postings(found, slots[i])
                    if len(sets) == 1:
                        hit = hit & sets[0]
                    else:  # an intersection costs the smaller set, a union the sum of all
                        hit = set().union(*map(hit.intersection, sets))
                    if not hit:
                        break
                if not hit:
                    continue
            if mode == OPEN:
                candidates.update(hit)
            elif mode == EXACT:
                for keys in blocked:
                    candidates.update(keys.intersection(hit))
                if negated is not None:
                    if len(hit) <= few:
                        hit = [key for key in hit if found.isdisjoint(negated_by[key])]
                    else:
                        sets = _postings(found, negated)
                        if sets:
                            hit = set(hit).difference(*sets)
                accepted.update(hit)
            else:
                checks = self._checks
                for key in hit:
                    if blocked and any(key in keys for keys in blocked):
                        candidates.add(key)
                    elif checks[key](found):
                        accepted.add(key)
        for keys in blocked:
            accepted = accepted - keys
        return accepted, candidates

    def stats(self) -> dict[str, int]:
        """Counts for explain output."""
        plans = self._plans
        return {
            "observers": len(self._keys),
            "never": len(self._keys) - len(plans),
            "indexed": sum(bool(plan.clauses) for plan in plans),
            "always_candidates": sum(not plan.clauses and plan.mode == OPEN for plan in plans),
            "exact": sum(plan.mode != OPEN for plan in plans),
            "exact_if_single": sum(bool(single_fields(plan.formula)) for plan in plans),
            "closures": len(self._checks),
            "terms": len(self._ids),
            "fields": len(self._fields),
        }


def _slot(members: list[tuple[K, frozenset[int]]]) -> dict[int, frozenset[K]]:
    postings: dict[int, set[K]] = {}
    for key, pids in members:
        for pid in pids:
            postings.setdefault(pid, set()).add(key)
    return {pid: frozenset(keys) for pid, keys in postings.items()}


__all__ = [
    "Condition",
    "Presearcher",
    "Term",
    "analyse",
    "condition",
    "field_reader",
    "irregular",
]
