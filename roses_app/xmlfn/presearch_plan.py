"""Compiling observers' formulas into plans and postings (see presearch.py).

An exact observer whose formula is a conjunction of positive clauses and negated terms
(in conjunctive normal form, ``_cnf``) is decided by set operations over postings
(pid -> observer keys); other exact formulas are small closures (``_closure``), run
for the observers whose condition holds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from roses_app.xmlfn.presearch_terms import Formula, Leaf

K = TypeVar("K", bound=Hashable)

MAX_CNF = 16  # clauses of an exact formula in conjunctive form; more: run as a closure

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


@dataclass(slots=True)  # one per observer: a hundred thousand
class _Plan(Generic[K]):
    key: K
    mode: int
    clauses: list[frozenset[int]]  # positive, each with a found pid if the observer holds
    negated: frozenset[int]  # EXACT: true if no pid of these is found
    check: Check | None = None  # CHECK: the formula
    formula: Formula | None = None


V = TypeVar("V")


class Index(dict[int, V]):
    """pid -> V, with its pids as a frozenset: an item's found pids (a dozen) are
    intersected with it in C over the smaller of the two, where a dict argument is
    walked whole and a ``get`` per pid found is a Python call (the nested postings
    of ten thousand subscriptions: 17 -> 6 µs per item).  Built whole and never
    changed after: ``pids`` is not kept up to date."""

    __slots__ = ("pids",)

    def __init__(self, entries: dict[int, V]) -> None:
        super().__init__(entries)
        self.pids = frozenset(entries)


Postings = Index[frozenset[Any]]  # pid -> observer keys


class _Group(NamedTuple):
    """Observers of one mode and number of clauses, and with negated pids or not.

    Flat: slot i holds their i-th clauses.  Nested (two clauses, one a pid shared by
    many observers, e.g. ``category = 'c'``): that pid -> the other clause's pids ->
    observers; an item costs a look-up per pid found and shared pid found, instead of
    an element per observer whose first clause holds."""

    mode: int
    slots: tuple[Postings, ...]
    nested: Index[Postings] | None
    clauses_by: dict[Any, list[frozenset[int]]]  # flat, two clauses or more: by observer
    negated: Postings | None  # EXACT: the pids that make them false
    negated_by: dict[Any, frozenset[int]]  # those pids by observer
    everyone: frozenset[Any]  # with no clause


def _postings(found: set[int], postings: Postings) -> list[frozenset[Any]]:
    """The postings of the pids found."""
    return list(map(postings.__getitem__, found.intersection(postings.pids)))


def _union(sets: list[frozenset[K]]) -> frozenset[K] | set[K]:
    return sets[0] if len(sets) == 1 else set().union(*sets)


def _slot(members: list[tuple[K, frozenset[int]]]) -> Postings:
    postings: dict[int, set[K]] = {}
    for key, pids in members:
        for pid in pids:
            postings.setdefault(pid, set()).add(key)
    return Index({pid: frozenset(keys) for pid, keys in postings.items()})
