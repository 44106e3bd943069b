"""The equivalences of seed 002 ("Propriétés des opérateurs logiques") that hold for
the v1 operators, checked with the reference evaluator on random streams."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import ACCESSORS, PREDICATES, SPLITTERS, event_lists, plans

from roses_app.algebra.plan.operators import Filter, Map, Node, Split, Stream, Union
from roses_app.algebra.reference.evaluator import RefEvent, RefInput, evaluate, evaluate_stream
from roses_app.algebra.reference.registry import event_order, ordered

LAWS = settings(max_examples=60, deadline=None)
predicates = st.sampled_from(PREDICATES)


def run(plan: Node, events: list[RefInput]) -> list:
    return evaluate(plan, events)


@LAWS
@given(event_lists(), plans(), predicates, predicates)
def test_selection_commutes(events, plan, p, q) -> None:
    assert run(Filter(Filter(plan, q), p), events) == run(Filter(Filter(plan, p), q), events)


@LAWS
@given(event_lists(), plans(), predicates, predicates)
def test_selection_cascade(events, plan, p, q) -> None:
    conj = Filter(plan, f"({p}) and ({q})")
    assert run(conj, events) == run(Filter(Filter(plan, q), p), events)


@LAWS
@given(event_lists(), plans(), predicates, predicates)
def test_selection_decomposes_over_union(events, plan, p, q) -> None:
    # The union is a set union: an event satisfying both predicates is there once.
    disj = Filter(plan, f"({p}) or ({q})")
    split_up = Union((Filter(plan, p), Filter(plan, q)))
    assert run(disj, events) == run(split_up, events)


@LAWS
@given(event_lists(), plans())
def test_union_is_idempotent(events, plan) -> None:
    assert run(Union((plan, plan)), events) == run(plan, events)


@LAWS
@given(event_lists(), plans(), plans(), st.sampled_from(ACCESSORS))
def test_map_commutes_with_union(events, left, right, accessor) -> None:
    whole = Map(Union((left, right)), accessor)
    parts = Union((Map(left, accessor), Map(right, accessor)))
    assert run(whole, events) == run(parts, events)


@LAWS
@given(event_lists(), plans(), plans(), plans())
def test_union_is_commutative_and_associative(events, f1, f2, f3) -> None:
    assert run(Union((f1, f2)), events) == run(Union((f2, f1)), events)
    left = Union((Union((f1, f2)), f3))
    right = Union((f1, Union((f2, f3))))
    flat = Union((f1, f2, f3))
    assert run(left, events) == run(right, events) == run(flat, events)


@LAWS
@given(event_lists(), plans(), predicates)
def test_selection_result_is_a_subset(events, plan, p) -> None:
    assert set(run(Filter(plan, p), events)) <= set(run(plan, events))


@LAWS
@given(event_lists(), plans(), st.sampled_from(SPLITTERS))
def test_split_is_the_seeds_partition(events, plan, by) -> None:
    # Ψ_split: output name' holds exactly {(t, i) in F | split(i) = name'} ...
    parts = evaluate_stream(Stream("s", Split(plan, by)), events)
    for name, part in parts.items():
        assert part == run(Filter(plan, f"string-join(({by}), ' ') = '{name}'"), events)
    # ... and every item with a (non-empty) name goes to exactly one output.
    named = run(Filter(plan, f"string-join(({by}), ' ') != ''"), events)
    assert sum(len(part) for part in parts.values()) == len(named)


events_to_order = st.lists(
    st.builds(
        RefEvent,
        st.integers(0, 3),
        st.integers(0, 3),
        st.sampled_from([None, "", "<item/>", "<item>a</item>"]),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(events_to_order)
def test_events_are_ordered_by_event_order(events: list[RefEvent]) -> None:
    """``ordered`` (plain tuples compared in C where it can) gives event_order's order,
    heartbeats tying with items on ts and seq included (None sorts as "")."""
    assert ordered(events) == sorted(events, key=event_order)
    assert ordered(iter(events)) == sorted(events, key=event_order)
