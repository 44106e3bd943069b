"""A fused batch handed to the sink as the stage made it (``spark.fusedrows``): a
replay's files made from it by index arrays are the files the per-stream rows give,
in event order, for any batch; the store writes the same rows either way."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.planner.program import INPUT_ITEM, TICK_OUTPUT, Program
from roses_app.algebra.reference.registry import RefEvent, ordered
from roses_app.replay import _line, write_outputs
from roses_app.replay_sink import FusedFiles, MemorySink
from roses_app.spark.fused import to_batch
from roses_app.spark.fusedrows import FusedRows
from roses_app.store import Store

ITEMS = ["<item>a</item>", "<item>b</item>", '<item>é\n"c"</item>', "<item>\x01</item>"]
KEYS = ("k0", "k1", "k2", "k3")
# output key -> the streams it stands for (k2: none, a frontier-only node; k3: a split)
STREAMS = {"k0": ["a", "b"], "k1": ["c"], "k3": ["split"]}


def program() -> Program:
    return Program(steps=(), outputs=tuple((n, key) for n, key in enumerate(KEYS)))


# one fused row: outputs, part, ts, seq, item (a split's rows have a part, the others none)
row = st.tuples(
    st.sets(st.sampled_from([0, 1, 2]), min_size=1).map(sorted),
    st.integers(0, 3),
    st.integers(0, 4),
    st.sampled_from(ITEMS),
)
split_row = st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from(["x", "y/z", ""]))


def fused_table(rows: list, splits: list, batches: int) -> pa.Table:
    """The rows as the stage makes them: each (row, part, item) once, a time mark
    per batch."""
    made: dict[tuple[int, str, str], tuple] = {}
    for outputs, ts, seq, item in rows:
        made.setdefault((seq, "", item), ([], "", ts, seq, item, "g", ts))[0].extend(outputs)
    for ts, seq, part in splits:
        made.setdefault((seq, part, ITEMS[seq % 2]), ([3], part, ts, seq, ITEMS[seq % 2], "g", ts))
    chunks = [list(made.values())[n::batches] for n in range(batches)]
    out = []
    for chunk in chunks:
        chunk = [(sorted(set(o)), *rest) for o, *rest in chunk]
        if chunk:
            latest = max(r[3] for r in chunk)
            chunk.append(([TICK_OUTPUT], "", 9, latest, None, None, 9))
        out.append(to_batch(chunk))
    return pa.Table.from_batches(out)


def expanded_files(rows: FusedRows, iso: bool) -> dict[tuple[str, str], bytes]:
    """What the per-stream rows give: events, in event order, a line each."""
    sink = MemorySink(["a", "b", "c", "split"])
    sink.write_batch("q", 0, rows.rows())
    line = partial(_line, iso_times=iso)
    return {
        (stream, part): b"".join(line(e.ts, e.item) for e in ordered(events))
        for stream, parts in sink.collected.items()
        for part, events in parts.items()
    }


# the input item of each seq, for a sink that holds them (a replay)
INPUTS = [ITEMS[seq % len(ITEMS)] for seq in range(5)]


def held(table: pa.Table) -> pa.Table:
    """The table as the stage makes it when the sink holds the inputs: an input
    event's own item is INPUT_ITEM, no row has a guid."""
    items = [
        INPUT_ITEM if item is not None and item == INPUTS[seq] else item
        for item, seq in zip(table["item"].to_pylist(), table["seq"].to_pylist(), strict=True)
    ]
    table = table.set_column(table.schema.get_field_index("item"), "item", pa.array(items))
    index = table.schema.get_field_index("guid")
    return table.set_column(index, "guid", pa.nulls(table.num_rows, pa.string()))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(row, max_size=25), st.lists(split_row, max_size=6), st.integers(1, 3), st.booleans()
)
def test_files_from_the_fused_rows_are_those_of_the_rows_per_stream(
    rows: list, splits: list, batches: int, inputs_held: bool
) -> None:
    """Also when the stage left out the items the sink holds: the same files."""
    table = fused_table(rows, splits, batches)
    fused = FusedRows(table, program(), STREAMS)
    expected = expanded_files(fused, False)
    if inputs_held:
        fused = FusedRows(held(table), program(), STREAMS, INPUTS)
        assert [r[:5] for r in fused.rows()] == [
            r[:5] for r in FusedRows(table, program(), STREAMS).rows()
        ]
    files = FusedFiles(fused, partial(_line, iso_times=False))
    got = {
        (stream, part): files.data(stream, part)
        for stream in ("a", "b", "c", "split")
        for part in files.parts(stream)
    }
    assert got == expected
    assert fused.count() == len(fused.rows())


def test_events_of_one_time_and_seq_come_in_item_order_as_the_reference_has_them() -> None:
    """Two items of one input event in one stream (a union of two maps) tie on time
    and seq: the item decides, in Python's order of strings."""
    rows = [([0], 5, 1, "<b/>"), ([0], 5, 1, "<a/>"), ([0], 4, 2, "<c/>"), ([0], 5, 1, "<é/>")]
    table = fused_table([(o, ts, seq, item) for o, ts, seq, item in rows], [], 1)
    fused = FusedRows(table, program(), STREAMS)
    files = FusedFiles(fused, partial(_line, iso_times=False))
    events = [RefEvent(4, 2, "<c/>"), RefEvent(5, 1, "<a/>"), RefEvent(5, 1, "<b/>")]
    events.append(RefEvent(5, 1, "<é/>"))
    assert files.data("a", "") == b"".join(_line(e.ts, e.item, False) for e in events)
    assert files.data("c", "") is None and files.parts("c") == []


def test_the_latest_seq_is_the_time_marks_and_none_without_one() -> None:
    table = fused_table([([0], 1, 3, ITEMS[0]), ([1], 2, 4, ITEMS[1])], [], 2)
    assert FusedRows(table, program(), STREAMS).latest_seq() == 4
    empty = FusedRows(pa.Table.from_batches([to_batch([])]), program(), STREAMS)
    assert empty.latest_seq() is None and empty.count() == 0


def test_a_replay_writes_the_fused_files_beside_the_other_streams(tmp_path: Path) -> None:
    """Stateless streams from the fused rows, another stream from its events: one
    file each, an empty one for a stream without output, a folder per split."""
    table = fused_table([([0], 1, 1, ITEMS[0]), ([1], 2, 2, ITEMS[2])], [(3, 3, "x")], 1)
    sink = MemorySink(["a", "b", "c", "split", "windowed"])
    assert sink.write_fused("stateless", 0, FusedRows(table, program(), STREAMS), 3)
    assert not sink.write_fused("stateless", 0, FusedRows(table, program(), STREAMS), 3)
    sink.write_batch("g1", 0, [("windowed", "", 7, 1, ITEMS[1])])
    fused = FusedFiles(sink.take_fused(), partial(_line, iso_times=True))
    outputs = {
        name: {part: ordered(e) for part, e in parts.items()}
        for name, parts in sink.collected.items()
    }
    outputs["a"].setdefault("", [])
    outputs["b"].setdefault("", [])
    outputs["c"].setdefault("", [])
    write_outputs(outputs, tmp_path, True, fused)
    assert (tmp_path / "a.jsonl").read_bytes() == _line(1, ITEMS[0], True)
    assert (tmp_path / "b.jsonl").read_bytes() == _line(1, ITEMS[0], True)
    assert (tmp_path / "c.jsonl").read_bytes() == _line(2, ITEMS[2], True)
    assert (tmp_path / "split" / "x.jsonl").read_bytes() == _line(3, ITEMS[1], True)
    assert (tmp_path / "windowed.jsonl").read_bytes() == _line(7, ITEMS[1], True)
    assert not (tmp_path / "a").exists()
    assert sink.position("stateless") == 3


def test_fused_rows_are_made_events_when_a_stream_of_theirs_has_others() -> None:
    """A stream with events from another batch (a backfill's rows): the fused rows
    are made events beside them, in one list per stream and part."""
    table = fused_table([([1], 2, 2, ITEMS[1])], [], 1)
    sink = MemorySink(["a", "b", "c", "split"])
    sink.write_batch("backfill", 0, [("c", "", 1, 1, ITEMS[0])])
    sink.write_fused("stateless", 0, FusedRows(table, program(), STREAMS), 2)
    assert sink.take_fused() is None
    assert sink.collected["c"][""] == [RefEvent(1, 1, ITEMS[0]), RefEvent(2, 2, ITEMS[1])]


def test_the_store_writes_the_rows_per_stream_of_a_fused_batch(tmp_path: Path) -> None:
    table = fused_table([([0, 1], 1, 1, ITEMS[0])], [(2, 2, "x")], 1)
    fused = FusedRows(table, program(), STREAMS)
    store = Store(tmp_path / "store.db")
    try:
        assert store.write_fused("stateless", 0, fused, fused.latest_seq())
        assert not store.write_fused("stateless", 0, fused, fused.latest_seq())
        assert store.position("stateless") == 2
        assert store.published == {"a": 1, "b": 1, "c": 1, "split": 1}
    finally:
        store.close()
