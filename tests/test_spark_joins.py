"""Joins, semijoin, diff and unnest on Spark (roses_app.spark.joins).

* The join_* replay fixtures (expected files checked by hand against the seed's tables
  and windows) run through both engines in tests/test_replay.py.
* Equi-join keys (roses_app.algebra.plan.equikeys): which predicates give one, and that
  pairing by key changes no result of the reference evaluator.
* Join state is bounded: Spark drops it once the watermark has passed.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from roses_app.algebra.plan.equikeys import EquiKey, equi_key, keyed_pairs
from roses_app.algebra.plan.operators import Diff, Join, Node, Semijoin, Source, TimeWindow, Window
from roses_app.algebra.reference.evaluator import RefInput, evaluate
from roses_app.config import load_config
from roses_app.replay import EventList, run_reference
from roses_app.spoolfiles import write_events
from roses_app.xmlfn.keys import key_strings_batch


@pytest.mark.parametrize(
    ("on", "key"),
    [
        ("$i1/link = $i2/link", EquiKey("link", "link")),
        ("$i2/link = $i1/guid", EquiKey("guid", "link")),
        ("link = $i2/@href", EquiKey("link", "@href")),  # the context item is $i1
        ("$i1/a/b eq $i2//c and contains($i1/title, 'x')", EquiKey("a/b", ".//c")),
        ("($i1/dc:creator = $i2/*/text()) and $i2/score > 2", EquiKey("dc:creator", "*/text()")),
        ("(every $x in $i1/c satisfies $x) and $i1/m = $i2/title", EquiKey("m", "title")),
        ("$i1/and = $i2/or", EquiKey("and", "or")),  # names, not operators
    ],
)
def test_equi_key_is_recognised(on: str, key: EquiKey) -> None:
    assert equi_key(on) == key


@pytest.mark.parametrize(
    "on",
    [
        "true()",
        "$i1/a = $i2/b or $i1/c",  # need not hold for a match
        "every $x in $i1/c satisfies true() and $i1/a = $i2/b",  # an empty $i1/c
        "if ($i1/c) then $i1/a = $i2/a else true()",
        "$i1/x = $i2/y to z",  # a range, not a path
        "$i1/a - b = $i2/c",  # arithmetic, not the name a-b
        "$i1/a = $i1/b",  # one item only
        "$i1/a[1] = $i2/b",  # predicates are outside the grammar
        "$i1/a != $i2/b",
        "$i1/a = $i2/b (: a comment :)",
        "$i1/a = $i2/b, true()",
        "string($i1/a) = string($i2/a)",
    ],
)
def test_no_key_unless_the_predicate_needs_one(on: str) -> None:
    assert equi_key(on) is None


def test_equikeys_imports_neither_lxml_nor_spark() -> None:
    code = (
        "import sys, roses_app.algebra.plan.equikeys; print({'lxml', 'pyspark'} & set(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"


def test_key_strings_are_the_string_values_compared_by_equality() -> None:
    items = [
        "<item><link>a<!-- not text --><b>x</b>y</link><link>z</link><link>z</link></item>",
        "<item><title>no link</title></item>",
        None,
        "<item><link",
    ]
    errors: list[str | None] = []
    got = key_strings_batch("link", (), items, on_error=lambda xml, exc: errors.append(xml))
    assert got == [["axy", "z"], [], [], []]
    assert errors == ["<item><link"]
    attributes = key_strings_batch("@href", (), ['<item href="h"/>'])
    texts = key_strings_batch(".//t/text()", (), ["<item><a><t>1</t><t>2</t></a></item>"])
    assert (attributes, texts) == ([["h"]], [["1", "2"]])


def test_keyed_pairs_are_the_pairs_sharing_a_key_in_range() -> None:
    probe = ([10, 20], [["a"], ["a", "b"]])
    build = ([5, 9, 15, 20], [["a"], ["b"], ["a", "b"], []])
    # t=10 meets [0, 10]: 5 (a) shares a, 9 (b) does not; t=20 meets [10, 20]: 15 only
    assert keyed_pairs(*probe, *build, lambda t: (t - 10, t)) == {(0, 0), (1, 2)}
    assert keyed_pairs(*probe, *build, lambda t: None) == set()


def _random_inputs(rng: random.Random, n: int) -> list[RefInput]:
    events = []
    for seq in range(n):
        links = "".join(f"<link>{rng.choice('pqrstuvw')}</link>" for _ in range(rng.randint(0, 2)))
        item = f"<item><title>t{seq}</title>{links}<n>{rng.randint(0, 3)}</n></item>"
        events.append(RefInput(rng.choice("AB"), rng.randint(0, 30), seq, item))
    return [*events, RefInput("", 1_000_000, n, None)]  # every time decided


def _binary(kind: str, left: Node, right: Node, on: str) -> Node:
    if kind == "semijoin":
        return Semijoin(left, right, on)
    if kind == "diff":
        return Diff(left, right, on)
    return Join(left, right, kind, on)


@pytest.mark.parametrize("kind", ["inner", "full", "semijoin", "diff"])
@pytest.mark.parametrize("delayed", [False, True])
def test_pairing_by_key_changes_no_result(kind: str, delayed: bool) -> None:
    # The same predicate, written so that no key is found: every pair is evaluated.
    keyed = "$i1/link = $i2/link and $i1/n != $i2/n"
    plain = "(some $l in $i1/link satisfies $l = $i2/link) and $i1/n != $i2/n"
    assert equi_key(keyed) is not None and equi_key(plain) is None
    a, b = Source("A"), Source("B")
    left = Window(a, TimeWindow(5, delay=2)) if delayed else a
    right = Window(b, TimeWindow(7))
    inputs = _random_inputs(random.Random(f"{kind}{delayed}"), 60)
    expected = evaluate(_binary(kind, left, right, plain), inputs)
    assert expected  # not a vacuous comparison
    assert evaluate(_binary(kind, left, right, keyed), inputs) == expected


# -- bounded state -------------------------------------------------------------------

DAY = 86_400_000_000  # µs
BOUNDED = """
settings: {{data_dir: {data}}}
sources:
  A: {{feed: "file:A.xml"}}
  B: {{feed: "file:B.xml"}}
streams:
  matched:
    join: {{left: A, right: {{window: {{from: B, time: 24h}}}}, on: "$i1/link = $i2/link",
            kind: left}}
"""


def _chunk(start: int, first_seq: int) -> list[RefInput]:
    """Two sides over two days from ``start``, an item every 6 hours on each; the last
    left one, at the latest time, finds no partner: it is decided only later."""
    events = []
    for k in range(8):
        for source in ("A", "B"):
            link = "alone" if (k, source) == (7, "A") else f"l{k % 3}"
            item = f"<item><title>{source}{k}</title><link>{link}</link></item>"
            events.append(RefInput(source, start + k * DAY // 4, first_seq + len(events), item))
    return events


@pytest.mark.spark
def test_join_state_is_dropped_once_the_watermark_passes(tmp_path: Path, spark: object) -> None:
    from roses_app.items import Event
    from roses_app.replay import MemorySink
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries

    (tmp_path / "feeds.yaml").write_text(BOUNDED.format(data=tmp_path / "data"))
    config = load_config(tmp_path / "feeds.yaml")
    streams = [s.stream for s in config.streams.values()]
    seen: list[RefInput] = []
    sink = MemorySink(list(config.streams))  # one store for both runs
    state_rows = []
    for n in range(2):  # two runs, ten days apart, on one checkpoint
        chunk = _chunk(10 * n * DAY, len(seen))
        seen += chunk
        events = [Event(e.source, e.ts, e.seq, e.item) for e in chunk]
        write_events(tmp_path / "log" / f"{n}.jsonl", events)
        engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True)  # type: ignore[arg-type]
        running = start_queries(engine, streams)
        await_all(running)
        assert [r.name for r in running][:1] == ["stateless"] and len(running) == 2
        out = sink.collected["matched"].get("", [])
        progress = running[-1].query.lastProgress
        assert progress["numInputRows"] == 0  # the last batch is the no-data one
        state_rows.append(sum(op["numRowsTotal"] for op in progress["stateOperators"]))
        # what is decided so far, no more: the last left item waits for the next run
        expected = run_reference(config, EventList(seen, iso_times=False))["matched"][""]
        assert sorted(set(out)) == expected
        assert (n == 0) == all("alone" not in e.item for e in out if e.item)
    # What the watermark has passed is gone: the state holds the last day, whatever
    # the number of days seen.
    assert state_rows[0] > 0
    assert state_rows[1] == state_rows[0]
