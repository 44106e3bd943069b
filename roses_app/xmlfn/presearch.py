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

Modules: ``presearch_terms`` (``Term``, ``Leaf``, ``Gate``, ``Condition``; deriving
conditions and formulas from an XPath token tree: ``condition``, ``analyse``),
``presearch_fields`` (reading field values from items: ``field_reader``,
``irregular``, string values; scanning them for terms), ``presearch_plan`` (formulas
as conjunctive forms or closures, plans, postings) and here the ``Presearcher``
(index build, match, stats), with the public names of the others re-exported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Generic

from lxml import etree

# the names marked F401 are not used here: re-exported (they were defined here)
from roses_app.xmlfn.presearch_fields import (
    _SPECIAL,
    Field,
    Reader,  # noqa: F401
    Variant,  # noqa: F401
    _anchored,
    _reader,
    _second,
    _text,
    _unusual,
    _variant,
    field_reader,
    irregular,
)
from roses_app.xmlfn.presearch_plan import (
    CHECK,
    EXACT,
    MAX_CNF,  # noqa: F401
    OPEN,
    Check,
    Index,
    K,
    Literal,  # noqa: F401
    Postings,  # noqa: F401
    _closure,
    _cnf,
    _Group,
    _Plan,
    _postings,
    _slot,
    _union,
)
from roses_app.xmlfn.presearch_terms import (
    _ANCHOR_SHIFT,
    ANY,
    END,
    FN_NAMESPACE,  # noqa: F401
    MAX_CLAUSES,
    SEPARATOR,
    START,
    WHOLE,
    WHOLE_ITEM,
    Analysis,  # noqa: F401
    Clauses,  # noqa: F401
    Condition,
    Formula,  # noqa: F401
    Gate,  # noqa: F401
    Leaf,
    Term,
    _analyse_expr,
    _Analysis,
    analyse,
    condition,
    leaves,
    single_fields,
)
from roses_app.xmlfn.xpath import Namespaces

NEST_MIN = 16  # observers sharing a pid from which two-clause ones are nested under it
FEW = 8  # observers below which each is checked rather than a posting looked up per pid


class Presearcher(Generic[K]):
    """A stored-query index over observers (XPath 3.1 expressions keyed by ``K``)."""

    def __init__(self, observers: Mapping[K, str], namespaces: Namespaces = ()) -> None:
        self._keys: list[K] = list(observers)
        self._ids: dict[Term, int] = {}
        # each set of pids once: observers share them (a name watched by several, no
        # negation): 100,000 observers, 55 MB less in each worker
        self._sets: dict[frozenset[int], frozenset[int]] = {}
        self._checks: dict[K, Check] = {}
        plans = [self._plan(key, _analyse_expr(observers[key], namespaces)) for key in self._keys]
        self._plans = [plan for plan in plans if plan is not None]
        self._groups = self._index(self._plans)
        self._fields = self._scanners(self._plans)
        self._tags = {field[1] for field in self._fields if field[1] is not None}
        self._few = FEW
        self._sets.clear()  # the plans hold the sets

    def _pid(self, term: Term, anchor: int = ANY) -> int:
        """A term and an anchor as one int: where this anchor holds, it is found."""
        return anchor << _ANCHOR_SHIFT | self._ids.setdefault(term, len(self._ids))

    def _leaf_pid(self, leaf: Leaf) -> int:
        return self._pid(leaf.term, leaf.anchor)

    def _set(self, pids: Iterable[int]) -> frozenset[int]:
        found = frozenset(pids)
        return self._sets.setdefault(found, found)

    def _plan(self, key: K, found: _Analysis) -> _Plan[K] | None:
        """How to decide the observer (None: never true)."""
        necessary = [self._set(map(self._pid, clause)) for clause in found.clauses]
        if frozenset() in necessary:
            return None
        formula = found.formula
        if formula is None:
            return _Plan(key, OPEN, necessary, self._set(()))
        cnf = _cnf(formula, self._leaf_pid)
        if cnf is not None and frozenset() in cnf:
            return None
        clauses = [] if cnf is None else [c for c in cnf if all(s for _, s in c)]
        negated = [] if cnf is None else [c for c in cnf if len(c) == 1 and not next(iter(c))[1]]
        flat = cnf is not None and len(clauses) + len(negated) == len(cnf)
        if flat and len(clauses) <= MAX_CLAUSES:
            pos = [self._set(p for p, _ in clause) for clause in clauses]
            neg = self._set(p for clause in negated for p, _ in clause)
            return _Plan(key, EXACT, pos, neg, formula=formula)
        # the formula's positive clauses are necessary too (see the module docstring)
        pos = list({*necessary, *(self._set(p for p, _ in clause) for clause in clauses)})
        check = _closure(formula, self._leaf_pid)
        return _Plan(key, CHECK, pos, self._set(()), check, formula)

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
                nested = Index({pid: _slot(others) for pid, others in inner.items()})
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
                for pid in found.intersection(nested.pids):
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


__all__ = [
    "Condition",
    "Presearcher",
    "Term",
    "analyse",
    "condition",
    "field_reader",
    "irregular",
]
