"""The rewrite rules of :mod:`roses_app.algebra.planner.rewrite`, one small function each:
``rule(node, env)`` gives the node rewritten, or None where the rule does not apply
(the equivalences, those refused and why: that module's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    Diff,
    Filter,
    GroupBy,
    Join,
    Map,
    Node,
    Semijoin,
    SessionWindow,
    Source,
    TimeWindow,
    Union,
    Window,
    WindowSpec,
)
from roses_app.algebra.time.eventtime import event_timed

Namespaces = tuple[tuple[str, str], ...]

# ω_time,1 keeps the events of the current timestamp only: ω0, the stream itself.
OMEGA0 = TimeWindow(1)
# Operators that read their inputs' Window through its spec (WindowCall, periodic α/γ).
WINDOW_READERS: tuple[type[Node], ...] = (Join, Semijoin, Diff, Aggregate, GroupBy)


@dataclass(frozen=True)
class Env:
    """What the rules may consult: the namespaces (to find which XPath engine a
    predicate runs on) and ``costed``: when False, a rule applies wherever its
    equivalence holds, even where it saves nothing (the tests use that to exercise
    every equivalence on more plans)."""

    namespaces: Namespaces = ()
    costed: bool = True


Rule = Callable[[Node, Env], Node | None]


# -- union: associativity, idempotence ---------------------------------------------------


def flatten_unions(node: Node, env: Env) -> Node | None:
    """Associativity: (F1 ∪ F2) ∪ F3 = F1 ∪ (F2 ∪ F3) = F1 ∪ F2 ∪ F3.

    ∪ is a set union of events (seed: F1 ∪ F2 = F1 ∪_set F2), so nesting is
    irrelevant; a flat union of plain sources is then read in one scan."""
    if not isinstance(node, Union) or not any(isinstance(c, Union) for c in node.inputs):
        return None
    inputs = tuple(x for c in node.inputs for x in (c.inputs if isinstance(c, Union) else (c,)))
    return Union(inputs, origin=node.origin)


def drop_duplicate_inputs(node: Node, env: Env) -> Node | None:
    """Idempotence of the set union: F ∪ F = F (the first copy is kept)."""
    if not isinstance(node, Union):
        return None
    unique = tuple(dict.fromkeys(node.inputs))
    return None if len(unique) == len(node.inputs) else Union(unique, origin=node.origin)


def unwrap_single_union(node: Node, env: Env) -> Node | None:
    """∪(F) = F: a union of one stream is that stream (its events are distinct)."""
    if isinstance(node, Union) and len(node.inputs) == 1:
        return node.inputs[0]
    return None


# -- windows: decomposition, ω0 ----------------------------------------------------------


def _family(window: Window) -> tuple[object, ...]:
    """Windows over one input whose contents at any time are nested (same upper end)."""
    spec = window.spec
    if isinstance(spec, CountWindow):
        return (window.input, "count")
    if isinstance(spec, SessionWindow):  # sessions of other gaps are not nested
        return (window.input, "session", spec.gap)
    return (window.input, "time", spec.period, spec.start, spec.delay)


def _size(spec: WindowSpec) -> int:
    if isinstance(spec, SessionWindow):
        return spec.gap
    return spec.size if isinstance(spec, CountWindow) else spec.width


def merge_windows_in_union(node: Node, env: Env) -> Node | None:
    """Décomposition: ω_time,w(F) = ω_time,w1(F) ∪ … ∪ ω_time,wn(F) and
    ω_count,N(F) = ω_count,N1(F) ∪ … ∪ ω_count,Nn(F), w = max wi, N = max Ni.

    Physically too: the windows share F's timestamps, and at each one the contents
    are nested (same upper end: same period, start and delay; the last N events are a
    suffix of the last N' ≥ N).  The union keeps the widest, at the first one's place."""
    if not isinstance(node, Union):
        return None
    widest: dict[tuple[object, ...], Window] = {}
    for child in node.inputs:
        if isinstance(child, Window):
            best = widest.setdefault(_family(child), child)
            if _size(child.spec) > _size(best.spec):
                widest[_family(child)] = child
    inputs: list[Node] = []
    for child in node.inputs:
        keep = widest.pop(_family(child), None) if isinstance(child, Window) else child
        if keep is not None:
            inputs.append(keep)
    return None if len(inputs) == len(node.inputs) else Union(tuple(inputs), origin=node.origin)


def drop_identity_window(node: Node, env: Env) -> Node | None:
    """ω_time,1 (no period, no delay) is ω0: the cascade ω_time,1(ω_time,w(F)) =
    ω_time,w(F) = ω_time,w(ω_time,1(F)) is the one case of "fenêtrage en cascade"
    that holds physically, and the seed's remark Window_ω0(f) = f.  Not over items
    read in publication time: there the window holds its items until the lateness has
    passed and gives them out in time order (roses_app.algebra.time.release), its input
    does not."""
    if isinstance(node, Window) and node.spec == OMEGA0 and not event_timed(node):
        return node.input
    return None


# -- selection and map -------------------------------------------------------------------


def _same_engine(first: str, second: str, env: Env) -> bool:
    """True if fusing keeps every predicate on its engine: lxml's XPath 1.0 is 20-30
    times faster than elementpath, and a conjunction runs on lxml only if both parts
    do.  Fusing a fast predicate with a slow one would evaluate the fast one on
    elementpath for every item, which costs more than the second call saved."""
    if not env.costed:
        return True
    from roses_app.xmlfn.fastpath import uses_fast_path

    def fast(expr: str) -> bool:
        return uses_fast_path(expr, "boolean", env.namespaces)

    return fast(first) == fast(second) == fast(_conjunction(first, second))


def _conjunction(first: str, then: str) -> str:
    # XPath's `and` evaluates left to right and stops at false: ``then`` never runs
    # (and never fails) on an item ``first`` rejects, exactly as in the cascade.
    return f"({first}) and ({then})"


def fuse_selections(node: Node, env: Env) -> Node | None:
    """Sélection en cascade: σ_p(σ_q(F)) = σ_{q ∧ p}(F), written ``(q) and (p)``.

    One observer call (one parse of each item) instead of two; the inner predicate
    comes first so that it guards the outer one as before.  Kept apart when the two
    predicates run on different XPath engines (see ``_same_engine``)."""
    if not (isinstance(node, Filter) and isinstance(node.input, Filter)):
        return None
    inner = node.input
    if not _same_engine(inner.where, node.where, env):
        return None
    return Filter(inner.input, _conjunction(inner.where, node.where), origin=node.origin)


def _plain_scan(union: Union) -> bool:
    """A union of plain sources: Spark reads it in one scan of the spool."""
    return all(isinstance(child, Source) for child in union.inputs)


def _fuses_with(selection: Filter, child: Node, env: Env) -> bool:
    return isinstance(child, Filter) and _same_engine(child.where, selection.where, env)


def push_selection_below_union(node: Node, env: Env) -> Node | None:
    """σ_p(F1 ∪ F2) = σ_p(F1) ∪ σ_p(F2): not written in the seed's section, but it
    follows from its definitions (σ keeps or drops each event, a heartbeat always;
    F1 ∪ F2 = F1 ∪_set F2), exactly as μ's commutativity with ∪ does.

    Pushed only when a copy of σ_p then fuses with a selection below it: otherwise
    each item meets p once either way and Spark would run one observer stage per
    branch instead of one.  Never into a union of plain sources, read in one scan."""
    if not (isinstance(node, Filter) and isinstance(node.input, Union)):
        return None
    union = node.input
    if _plain_scan(union):
        return None
    if env.costed and not any(_fuses_with(node, c, env) for c in union.inputs):
        return None
    return Union(tuple(replace(node, input=c) for c in union.inputs), origin=union.origin)


def push_map_below_union(node: Node, env: Env) -> Node | None:
    """Commutativité avec l'union: μ(F1 ∪ F2) = μ(F1) ∪ μ(F2).

    μ is per event (λ drops an item, a heartbeat stays one) and both sides are sets
    of events.  Not in RULES: no rule fuses anything with a map, so the push never
    saves work: each item is still mapped once, Spark runs one mutator stage per
    branch instead of one, and a union shared with another stream stops being shared.
    Pass ``rules=(*RULES, push_map_below_union)`` to rewrite() to use it."""
    if not (isinstance(node, Map) and isinstance(node.input, Union)):
        return None
    union = node.input
    if _plain_scan(union):
        return None
    return Union(tuple(replace(node, input=c) for c in union.inputs), origin=union.origin)


RULES: tuple[Rule, ...] = (
    flatten_unions,
    drop_duplicate_inputs,
    unwrap_single_union,
    merge_windows_in_union,
    drop_identity_window,
    fuse_selections,
    push_selection_below_union,
)
