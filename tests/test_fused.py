"""The fused stateless stage (no Spark): many streams in one program, each item parsed
once, with and without the presearcher, give exactly the reference's events."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import PREDICATES, event_lists, stream_plans

from roses_app.algebra.plan.operators import Filter, Map, Source, Split, Stream, Union, XQuery
from roses_app.algebra.planner.program import INPUT_ITEM, TICK_OUTPUT, build_program
from roses_app.algebra.reference.evaluator import RefEvent, RefInput, evaluate_streams
from roses_app.xmlfn.fused import run_program

SUBSCRIPTIONS = (
    *PREDICATES,
    "contains(lower-case(string(.)), 'lava')",
    "contains(lower-case(title), 'vote') and not(category = 'sport')",
    "contains(., 'Iceland') or category = ('science', 'world')",
    "starts-with(title, 'volcano')",
    "not(contains(lower-case(.), 'lava'))",
    "contains(lower-case(title), 'lava') and not(contains(lower-case(.), 'vote'))",
)


def fused_outputs(
    streams: list[Stream], events: list[RefInput], *, presearch: bool, inputs_held: bool = False
) -> dict[str, dict[str, list[RefEvent]]]:
    """What the stateless query would publish, per stream and part (``inputs_held``:
    its items that are input items taken back from the inputs, as a replay does)."""
    program = build_program([(s.plan, s.name) for s in streams])
    rows = run_program(
        program,
        [e.source for e in events],
        [e.ts for e in events],
        [e.seq for e in events],
        [e.item for e in events],
        presearch=presearch,
        inputs_held=inputs_held,
    )
    inputs = {e.seq: e.item for e in events}
    out: dict[str, dict[str, list[RefEvent]]] = {s.name: {} for s in streams}
    for outputs, part, ts, seq, item, guid, _ in rows:
        if inputs_held:
            assert guid is None
            item = inputs[seq] if item == INPUT_ITEM else item
        for index in outputs if item is not None else ():
            key = program.outputs[index][1]
            out[key].setdefault(part, []).append(RefEvent(ts, seq, item))
    return {name: {p: sorted(evs) for p, evs in parts.items()} for name, parts in out.items()}


def reference_outputs(
    streams: list[Stream], events: list[RefInput]
) -> dict[str, dict[str, list[RefEvent]]]:
    expected = evaluate_streams(streams, events)
    return {n: {p: evs for p, evs in parts.items() if evs} for n, parts in expected.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(stream_plans(), min_size=1, max_size=5), event_lists())
def test_random_streams_in_one_program_equal_the_reference(
    plans: list[object], events: list[RefInput]
) -> None:
    streams = [Stream(f"s{n}", plan) for n, plan in enumerate(plans)]  # type: ignore[arg-type]
    expected = reference_outputs(streams, events)
    assert fused_outputs(streams, events, presearch=True) == expected
    assert fused_outputs(streams, events, presearch=False) == expected
    assert fused_outputs(streams, events, presearch=True, inputs_held=True) == expected


def test_with_the_inputs_held_only_made_items_come_back() -> None:
    """A replay holds the input items: the rows of a filter's and a split's items
    carry INPUT_ITEM (nothing to send back), a map's new item its text."""
    item = "<item><title>Lava</title><category>geo</category></item>"
    lava = Filter(Source("wire"), "contains(title, 'Lava')")
    streams = [
        Stream("lava", lava),
        Stream("by", Split(Source("wire"), "string(category)")),
        Stream("short", Map(lava, "title")),
    ]
    program = build_program([(s.plan, s.name) for s in streams])
    rows = run_program(program, ["wire"], [5], [1], [item], inputs_held=True)
    made = {(tuple(outputs), part, text, guid) for outputs, part, _, _, text, guid, _ in rows}
    assert made == {
        ((0,), "", INPUT_ITEM, None),
        ((1,), "geo", INPUT_ITEM, None),
        ((2,), "", "<item><title>Lava</title></item>", None),  # the title alone
        ((TICK_OUTPUT,), "", None, None),
    }


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(SUBSCRIPTIONS), min_size=1, max_size=30),
    event_lists(),
)
def test_many_subscriptions_on_one_source_equal_the_reference(
    wheres: list[str], events: list[RefInput]
) -> None:
    streams = [Stream(f"sub{n}", Filter(Source("a"), w)) for n, w in enumerate(wheres)]
    assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)


ORIGINS = (
    Source("a"),
    Source("b"),
    Union((Source("a"), Source("b"))),
    Union((Source("b"), Source("c"))),
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(ORIGINS), st.sampled_from(SUBSCRIPTIONS)), max_size=30),
    event_lists(),
)
def test_subscriptions_on_sources_and_unions_equal_the_reference(
    subscriptions: list[tuple[Source | Union, str]], events: list[RefInput]
) -> None:
    """Filters on sources and unions of sources share one presearch of each item,
    and each keeps the items of its own sources only."""
    streams = [Stream(f"sub{n}", Filter(o, w)) for n, (o, w) in enumerate(subscriptions)]
    if streams:
        assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)


def test_one_presearch_per_item_whatever_the_unions_it_is_in(monkeypatch: object) -> None:
    from roses_app.xmlfn.presearch import Presearcher

    matched: list[object] = []
    real_match = Presearcher.match

    def counting_match(self, item):  # type: ignore[no-untyped-def]
        matched.append(item)
        return real_match(self, item)

    monkeypatch.setattr(Presearcher, "match", counting_match)  # type: ignore[attr-defined]
    streams = [
        Stream(f"sub{n}", Filter(origin, f"contains(title, 'w{n}')"))
        for n, origin in enumerate(ORIGINS * 5)
    ]
    events = [
        RefInput("ab"[k % 2], k, k + 1, f"<item><title>w{k} w{k + 4}</title></item>")
        for k in range(12)
    ]
    assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)
    assert len(matched) == len(events)


def test_a_union_only_presearched_filters_read_is_not_computed(monkeypatch: object) -> None:
    from roses_app.xmlfn.fused import Run

    computed: list[int] = []
    real_union = Run._union

    def counting_union(self, n, step):  # type: ignore[no-untyped-def]
        computed.append(n)
        return real_union(self, n, step)

    monkeypatch.setattr(Run, "_union", counting_union)  # type: ignore[attr-defined]
    both = Union((Source("a"), Source("b")))
    subs = [Stream(f"sub{n}", Filter(both, f"contains(title, 'w{n}')")) for n in range(4)]
    events = [
        RefInput("ab"[k % 2], k, k + 1, f"<item><title>w{k % 4}</title></item>") for k in range(8)
    ]
    assert fused_outputs(subs, events, presearch=True) == reference_outputs(subs, events)
    assert computed == []  # each filter took the loaded items of a and b
    # a stream of the union itself: its items are computed, and the filters still agree
    streams = [*subs, Stream("all", both)]
    assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)
    assert len(computed) == 1


def test_items_of_a_source_no_presearched_filter_reads_are_not_matched(
    monkeypatch: object,
) -> None:
    from roses_app.xmlfn.presearch import Presearcher

    matched: list[str] = []
    real_match = Presearcher.match

    def counting_match(self, item):  # type: ignore[no-untyped-def]
        matched.append(item.findtext("title"))
        return real_match(self, item)

    monkeypatch.setattr(Presearcher, "match", counting_match)  # type: ignore[attr-defined]
    streams = [
        Stream("on_a", Filter(Source("a"), "contains(title, 'w1')")),
        Stream("on_a_or_b", Filter(Union((Source("a"), Source("b"))), "contains(title, 'w2')")),
        Stream("all", Union((Source("a"), Source("b"), Source("c")))),
    ]
    events = [
        RefInput("abc"[k % 3], k, k + 1, f"<item><title>w{k % 4} {k}</title></item>")
        for k in range(12)
    ]
    assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)
    # one match per item of a or b; c's items reach a stream, but no filter reads c
    assert sorted(matched) == sorted(f"w{k % 4} {k}" for k in range(12) if k % 3 != 2)


def test_each_item_is_parsed_once_and_a_mutator_called_once_per_batch(monkeypatch: object) -> None:
    from roses_app.xmlfn import fused, xquery

    parsed: list[str] = []
    calls: list[int] = []
    real_mutate = xquery.mutate_batch

    def counting_mutate(query, namespaces, xmls, on_error=None):  # type: ignore[no-untyped-def]
        calls.append(len(xmls))
        return real_mutate(query, namespaces, xmls, on_error)

    real_fromstring = fused.etree.fromstring

    def counting_fromstring(text, parser=None):  # type: ignore[no-untyped-def]
        parsed.append(text)
        return real_fromstring(text, parser)

    monkeypatch.setattr(xquery, "mutate_batch", counting_mutate)  # type: ignore[attr-defined]
    monkeypatch.setattr(fused.etree, "fromstring", counting_fromstring)  # type: ignore[attr-defined]
    tag = XQuery("<item>{ $i/*, <seen/> }</item>")
    volcano = Filter(Source("a"), "contains(lower-case(string(.)), 'volcano')")
    streams = [
        Stream(f"f{n}", Filter(Source("a"), f"contains(title, 'w{n}')")) for n in range(20)
    ] + [
        Stream("tagged", Map(volcano, xquery=tag)),
        Stream("split", Split(Source("a"), "string(category)")),
    ]
    items = [
        f"<item><title>volcano w{n}</title><category>c{n % 2}</category></item>" for n in range(8)
    ]
    events = [RefInput("a", n, n, item) for n, item in enumerate(items)]
    got = fused_outputs(streams, events, presearch=True)
    # each input item once, for 22 streams; each mutator result once (its guid)
    assert parsed[: len(items)] == items
    assert len(parsed) == len(set(parsed)) == 2 * len(items)
    assert calls == [8]  # the mutator: one call for the whole batch
    assert got == reference_outputs(streams, events)


def test_observers_the_presearcher_decides_are_never_compiled() -> None:
    from roses_app.xmlfn.fused import compiled

    streams = [
        Stream(f"sub{n}", Filter(Source("a"), f"contains(lower-case(title), 'w{n}')"))
        for n in range(30)
    ] + [Stream("long", Filter(Source("a"), "string-length(title) > 7"))]
    events = [
        RefInput("a", k, k + 1, f"<item><title>W{k} w{k + 3}</title></item>") for k in range(12)
    ]
    program = build_program([(s.plan, s.name) for s in streams])
    assert fused_outputs(streams, events, presearch=True) == reference_outputs(streams, events)
    functions = compiled(program).functions
    # only the observer the presearcher cannot decide had to be evaluated, so compiled
    assert [program.steps[n].arg for n in functions] == ["string-length(title) > 7"]
    assert len(functions.makers) == 31
