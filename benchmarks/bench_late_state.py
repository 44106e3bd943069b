#!/usr/bin/env python3
"""Benchmark: the late windows' state, saved and read back once per poll, as the
daemon's Spark operator does (one micro-batch per poll), side by side in one run.

N items (default 100,000) arrive in polls of --group items, 30 s apart; 90% are
published up to 5 s before they arrive, 10% 1 to 5 minutes before (within the
lateness, --lateness minutes, default 10).  For a tumbling (1m every 1m), a sliding
(5m every 1m) and a daily window (1d every 1d), the same
:class:`~roses_app.algebra.time.lateness.LateWindows` runs poll after poll, its state
saved and read back in between:

  now       the windows as JSON, the items in time slices (a map state on Spark:
            each slice's items as JSON, one value per slice); a poll reads the
            slices it adds to or computes, and writes back those it changed
  before    the windows and every item kept as one JSON text (each item once per
            key), written whole each poll (the state as it was)

and it prints items/s of the whole (arrival handling, window computations, the
state's round trip; no reducer: each result is a constant), the bytes written per
poll (mean and largest), with the ratios.  Both must publish the same windows.
Figures depend on the machine (2 cores here).

    .venv/bin/python benchmarks/bench_late_state.py [--items 100000] [--group 500]

Backs: docs/event-time.md, late windows' state per poll (items in slices: bytes
written a poll and items/s, against one JSON value).
"""

from __future__ import annotations

import random
import time
from typing import Any

import orjson
from benchlib import Row, bench_parser, fill_defaults, repeated, report

from roses_app.algebra.plan.operators import Report, TimeWindow
from roses_app.algebra.time.lateness import LateWindows
from roses_app.algebra.time.panes import Arrival, plain_entries
from roses_app.algebra.time.slices import ChunkId, Entry, MemorySlices

S = 1_000_000  # µs
DAY = 86_400 * S
SHAPES = {
    "tumbling": TimeWindow(60 * S, 60 * S),
    "sliding": TimeWindow(300 * S, 60 * S),
    "daily": TimeWindow(DAY, DAY),
}


def polls(n: int, group: int, seed: int = 7) -> list[list[Arrival]]:
    rng = random.Random(seed)
    out: list[list[Arrival]] = []
    for i in range(n):
        if i % group == 0:
            out.append([])
        ingest = (i // group) * 30 * S
        early = rng.randint(1, 5 * S) if rng.random() < 0.9 else rng.randint(60 * S, 300 * S)
        item = f"<item><title>{i}</title><category>c{i % 7}</category></item>"
        out[-1].append(Arrival(ingest - early, i, item))
    return out


class EncodedSlices(MemorySlices):
    """Slices kept as JSON text, as the map state keeps them; counts bytes written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    def get(self, chunk: ChunkId) -> list[Entry] | None:  # type: ignore[override]
        text = dict.get(self, chunk)
        return None if text is None else list(map(Entry._make, orjson.loads(text)))

    def put(self, chunk: ChunkId, entries: list[Entry]) -> None:
        text = orjson.dumps(plain_entries(entries))
        self.written += len(text)
        self[chunk] = text  # type: ignore[assignment]


def run(
    spec: TimeWindow, groups: list[list[Arrival]], lateness: int, whole: bool
) -> tuple[float, list[int], list[Any]]:
    """(seconds, bytes written per poll, emissions); ``whole``: the state as it was."""
    started = time.perf_counter()
    meta: bytes | None = None
    store = EncodedSlices()
    written: list[int] = []
    emitted: list[Any] = []
    for group in groups:
        if whole and meta is not None:  # every item read back from the one text
            data = orjson.loads(meta)
            store = EncodedSlices()
            for (key, n, c), entries in data.pop("items"):
                store[key, n, c] = orjson.dumps(entries)  # type: ignore[assignment]
        else:
            data = None if meta is None else orjson.loads(meta)
        windows = LateWindows.load(spec, lateness, Report(), data, store)
        planned = windows.plan([group])
        emitted += windows.settle(planned, ["<r/>"] * len(planned.computations)).emissions
        store.written = 0
        saved = windows.dump()
        if whole:
            saved["items"] = [[k, orjson.loads(v)] for k, v in dict.items(store)]
            store.written = 0
        meta = orjson.dumps(saved, option=orjson.OPT_NON_STR_KEYS)
        written.append(len(meta) + store.written)
    return time.perf_counter() - started, written, emitted


def measure(groups: list[Any], items: int, lateness: int) -> list[Row]:
    """Each window shape, its state now and as it was: a row each."""
    rows: list[Row] = []
    for name, spec in SHAPES.items():
        now, now_bytes, now_out = run(spec, groups, lateness, whole=False)
        before, before_bytes, before_out = run(spec, groups, lateness, whole=True)
        if now_out != before_out:
            raise SystemExit(f"{name}: the two states published different windows")
        now_mean, before_mean = sum(now_bytes) / len(groups), sum(before_bytes) / len(groups)
        rows.append({
            "window": name,
            "now items/s": round(items / now),
            "now kB a poll": now_mean / 1e3,
            "now largest kB": max(now_bytes) / 1e3,
            "before items/s": round(items / before),
            "before kB a poll": before_mean / 1e3,
            "before largest kB": max(before_bytes) / 1e3,
            "time ratio": before / now,
            "bytes ratio": before_mean / now_mean,
        })  # fmt: skip
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 100,000; --quick 2,000)")
    parser.add_argument("--group", type=int, default=500, help="items per poll")
    parser.add_argument("--lateness", type=int, default=10, help="minutes")
    args = parser.parse_args()
    fill_defaults(args, {"items": (2_000, 100_000)})
    groups = polls(args.items, args.group)
    lateness = args.lateness * 60 * S
    runs = repeated(args, lambda: measure(groups, args.items, lateness))
    report(
        args,
        f"Late windows' state per poll: {args.items:,} items in polls of {args.group}",
        runs,
        notes=["Both states published the same windows (checked)."],
    )


if __name__ == "__main__":
    main()
