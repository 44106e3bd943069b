"""The time slices of a periodic window's items (roses_app.algebra.time.slices): whatever
the micro-batches, the flushes and the chunks merged, a range reads what was added and
not forgotten, and the store holds each item once, in few chunks per slice."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from roses_app.algebra.time.slices import MAX_CHUNKS, Entry, MemorySlices, Slices

KEYS = st.sampled_from([None, "a", "b"])
ADD = st.tuples(st.just("add"), KEYS, st.integers(0, 20))
FORGET = st.tuples(st.just("forget"), KEYS, st.none() | st.integers(0, 20))
READ = st.tuples(st.just("read"), KEYS, st.integers(0, 60), st.integers(0, 30))
BATCHES = st.lists(st.lists(ADD | FORGET | READ, max_size=12), max_size=60)


@settings(max_examples=200, deadline=None)
@given(BATCHES, st.integers(1, 7))
def test_a_range_reads_what_was_added_and_not_forgotten(batches: list, width: int) -> None:  # type: ignore[type-arg]
    store = MemorySlices()
    held: list = []  # type: ignore[type-arg]
    model: dict[str | None, set[Entry]] = {}
    seq = 0
    for batch in batches:
        # each micro-batch starts from the store and the saved index, as on Spark
        slices = Slices.load(width, store, orjson.loads(orjson.dumps(held)))
        for op in batch:
            if op[0] == "add":
                seq += 1
                entry = Entry(op[2], seq, f"<i>{seq}</i>")
                slices.add(op[1], entry)
                model.setdefault(op[1], set()).add(entry)
            elif op[0] == "forget":
                _, key, before = op
                slices.forget(key, before)
                # a slice goes whole: its entries before ``before`` may stay
                model[key] = {
                    e for e in model.get(key, set())
                    if before is not None and (e.ts // width + 1) * width > before
                }  # fmt: skip
            else:
                _, key, low, span = op
                expected = sorted(e for e in model.get(key, ()) if low <= e.ts <= low + span)
                assert slices.between(key, low, low + span) == expected
        slices.flush()
        held = slices.dump()
    stored = [e for entries in store.values() for e in entries]
    assert sorted(stored) == sorted(e for found in model.values() for e in found)
    chunks: dict[tuple[str | None, int], int] = {}
    for key, n, _ in store:
        chunks[key, n] = chunks.get((key, n), 0) + 1
    assert all(count < MAX_CHUNKS for count in chunks.values())


def test_a_slice_added_to_in_every_micro_batch_keeps_few_chunks() -> None:
    """One chunk per micro-batch that added to a slice, merged into one at MAX_CHUNKS:
    a micro-batch writes what it added, and now and then the slice once."""
    store = MemorySlices()
    held: list = []  # type: ignore[type-arg]
    written = []
    for batch in range(3 * MAX_CHUNKS):
        slices = Slices.load(10, store, held)
        before = {chunk: list(entries) for chunk, entries in store.items()}
        slices.add("k", Entry(batch % 10, batch, f"<i>{batch}</i>"))
        slices.flush()
        held = slices.dump()
        written.append(sum(len(v) for c, v in store.items() if before.get(c) != v))
        assert slices.between("k", 0, 9) == sorted(
            Entry(b % 10, b, f"<i>{b}</i>") for b in range(batch + 1)
        )
    assert len(store) < MAX_CHUNKS
    assert written.count(1) >= 3 * MAX_CHUNKS - 3  # all but the merges wrote one item
