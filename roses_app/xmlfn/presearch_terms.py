"""Necessary conditions and exact formulas of XPath observers (see presearch.py).

Each observer is analysed once into a *necessary condition*, in conjunctive form: up
to ``MAX_CLAUSES`` clauses of terms ``(field, lowered, text)``, each clause with a
term that occurs whenever the observer is true.  A term occurs if ``text`` is in the
string value of ``field``, after ``str.lower()`` (elementpath's ``lower-case``) if
``lowered``.  ``field`` is ``.`` (the item) or a simple path (``title``,
``{uri}creator``, ``enclosure/@url``, ``@lang``, ``title[1]``).

An *exact* observer's truth is a formula over where its terms occur (anywhere, at the
start or end of a value, as a whole value); a leaf reading a field which may select
several nodes is exact only where the field has at most one value (``Leaf.single``).
Here: the types (``Term``, ``Leaf``, ``Gate``, ``Condition``) and their derivation from
an XPath token tree (``condition``, ``analyse``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable
from dataclasses import dataclass, replace
from itertools import product
from typing import Any, NamedTuple

from roses_app.heap import collector_paused
from roses_app.xmlfn.xpath import ITEM_VARIABLES, Namespaces, syntax_tree
from roses_app.xmlfn.xpath_shapes import forget_shapes, parsed_shape, split_literals

WHOLE_ITEM = "."
# Joins the values of a multi-valued field: XML text never holds U+0000, and no term
# may contain it, so a match never spans two values.
SEPARATOR = "\x00"
FN_NAMESPACE = "http://www.w3.org/2005/xpath-functions"
MAX_CLAUSES = 3  # clauses of a necessary condition (an exact formula may have as many)

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
# An observer's literals, and the model it shares the analysis of (see _analysed)
_Like = tuple[tuple[str, ...], tuple[tuple[str, ...], _Analysis]]
_Found = _Analysis | _Like
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


# Analyses made in this process, by expression and namespaces.  Reading feeds.yaml
# parses every observer (to check it) and keeps its analysis here, so a presearcher
# built later does not parse it again; a Spark worker gets the driver's (``shipped``,
# ``remember``).  A presearcher of 10,000 observers took 3.4 s to build from the
# observers and 0.5 s from their analyses (one process, collector on).  An observer
# of a shape met before may be kept as a :data:`_Like` until its analysis is asked.
_known: dict[tuple[str, Namespaces], _Analysis | _Like] = {}
_remembered: set[str] = set()
MAX_KNOWN = 1_000_000  # beyond, the memo starts again (a daemon reading many configs)


def check_observer(
    expr: str, namespaces: Namespaces = (), variables: tuple[str, ...] = ITEM_VARIABLES
) -> None:
    """:func:`~roses_app.xmlfn.xpath.check_xpath`, keeping the analysis of an item
    expression (an observer, an accessor) for the presearchers of this process.  An
    item expression of a shape met before is not parsed again (see xpath_shapes)."""
    if variables != ITEM_VARIABLES:
        syntax_tree(expr, namespaces, variables)
    elif (expr, namespaces) not in _known:
        _keep(expr, namespaces, _analysed(expr, namespaces))


def _keep(expr: str, namespaces: Namespaces, found: _Found) -> _Found:
    if len(_known) >= MAX_KNOWN:
        _known.clear()
    _known[expr, namespaces] = found
    return found


def _analyse_expr(expr: str, namespaces: Namespaces) -> _Analysis:
    found = _known.get((expr, namespaces))
    if found is None:
        found = _analysed(expr, namespaces)
    if not isinstance(found, _Analysis):
        literals, (first, model) = found
        found = _renamed(model, dict(zip(first, literals, strict=True)))
    _keep(expr, namespaces, found)
    return found


def shipped(observers: Iterable[str], namespaces: Namespaces) -> bytes:
    """The analyses of ``observers`` (made now if not yet), as bytes for
    :func:`remember` in another process (an observer of a shape met before as a
    :data:`_Like`, its model pickled once: 100,000 observers, 19 to 4 MB)."""
    found = {}
    for expr in set(observers):
        key = (expr, namespaces)
        found[key] = _known.get(key) or _keep(expr, namespaces, _analysed(expr, namespaces))
    return pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)


def forget() -> None:
    """Forget every analysis and parsed shape, as a new process starts (tests)."""
    _known.clear()
    _by_shape.clear()
    forget_shapes()


def remember(key: str, analyses: bytes) -> None:
    """Keep analyses :func:`shipped` by another process, once per ``key``."""
    if key in _remembered:
        return
    with collector_paused():  # a graph of small objects, no cycle: 1.4 s -> 0.06 s
        _known.update(pickle.loads(analyses))  # bytes of our own driver
    _remembered.add(key)


# (shape, namespaces, literal signature) -> the literals of the first observer of
# that shape and signature, and its analysis
_Model = tuple[tuple[str, ...], _Analysis]
_by_shape: dict[tuple[str, Namespaces, tuple[tuple[int, ...], ...]], _Model] = {}


def _analysed(expr: str, namespaces: Namespaces) -> _Found:
    """The analysis of an observer.  One of a shape met before (see xpath_shapes)
    whose literals compare to one another as the earlier one's did (equal, shorter,
    sorted before, empty) has the earlier analysis, with its literals instead (a
    :data:`_Like`): the analysis reads literals only through those comparisons.  (A
    config of 100,000 keyword observers in 21 shapes: 21 parses, 615 analyses.)"""
    split = split_literals(expr)
    shape = None if split is None else parsed_shape(split[0], namespaces)
    if split is None or shape is None:
        return _analyse(*syntax_tree(expr, namespaces))
    template, literals = split
    key = (template, namespaces, _signature(literals))
    earlier = _by_shape.get(key)
    if earlier is not None:
        return (tuple(literals), earlier)
    found = _analyse(shape.tree.filled(literals), shape.parser)
    if len(_by_shape) >= MAX_KNOWN:
        _by_shape.clear()
    _by_shape[key] = (tuple(literals), found)
    return found


def _signature(literals: list[str]) -> tuple[tuple[int, ...], ...]:
    """What the analysis sees of the literals: per literal, its rank among their
    texts and among their lengths, whether it is empty or holds SEPARATOR."""
    texts = {text: rank for rank, text in enumerate(sorted(set(literals)))}
    lengths = {size: rank for rank, size in enumerate(sorted({len(t) for t in literals}))}
    return tuple((texts[t], lengths[len(t)], not t, SEPARATOR in t) for t in literals)


def _renamed(found: _Analysis, names: dict[str, str]) -> _Analysis:
    """``found`` with each term's text replaced by ``names[text]``.  (Functions of
    the module, no closure calling itself: a worker's analyses are frozen without a
    collection, which such cycles would need: see heap.building_long_lived.)"""
    clauses = tuple(frozenset(_term(t, names) for t in clause) for clause in found.clauses)
    return _Analysis(clauses, _formula(found.formula, names))


def _term(old: Term, names: dict[str, str]) -> Term:
    return Term(old.field, old.lowered, names[old.text])


def _formula(old: Formula | None, names: dict[str, str]) -> Formula | None:
    if isinstance(old, Leaf):
        return Leaf(_term(old.term, names), old.anchor, old.single)
    if isinstance(old, Gate):
        args = tuple(_formula(arg, names) for arg in old.args)
        return Gate(old.op, args)  # type: ignore[arg-type]
    return old


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
