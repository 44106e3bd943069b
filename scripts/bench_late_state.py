#!/usr/bin/env python3
"""Benchmark: the late windows' state, saved and read back once per poll, as the
daemon's Spark operator does (one micro-batch per poll), side by side in one run.

N items (default 100,000) arrive in polls of --group items, 30 s apart; 90% are
published up to 5 s before they arrive, 10% 1 to 5 minutes before (within the
lateness, 10 minutes).  For a tumbling (1m every 1m) and a sliding (5m every 1m)
window, the same :class:`~roses_app.algebra.lateness.LateWindows` runs poll after
poll, its state saved to a JSON text and read back in between:

  now       each item written once per key, orjson (what the operator does)
  before    each item written once per window it is in, json (the state as it was)

and it prints items/s of the whole (arrival handling, window computations, the
state's round trip; no reducer: each result is a constant) and the largest state
text, with the ratio.  Both must publish the same windows.  Figures depend on the
machine (2 cores here).

    .venv/bin/python scripts/bench_late_state.py [--items 100000] [--group 500]
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
from benchlib import argument_parser

from roses_app.algebra.lateness import LateWindows
from roses_app.algebra.panes import Arrival
from roses_app.algebra.plan import Report, TimeWindow

S = 1_000_000  # µs
LATENESS = 600 * S
SHAPES = {"tumbling": TimeWindow(60 * S, 60 * S), "sliding": TimeWindow(300 * S, 60 * S)}


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


def now_codec(windows: LateWindows) -> str:
    return orjson.dumps(windows.dump(), option=orjson.OPT_NON_STR_KEYS).decode()


def before_codec(windows: LateWindows) -> str:
    """The state as it was written before: every window with its own items."""
    data = windows.dump()
    data.pop("items", None)
    data["panes"] = [
        [n, key, start, end, sorted(windows.panes[n, key].entries), closed, touched]
        for n, key, start, end, _, closed, touched in data["panes"]
    ]
    return json.dumps(data)


def run(
    spec: TimeWindow,
    groups: list[list[Arrival]],
    codec: Callable[[LateWindows], str],
    loads: Callable[[str], Any],
) -> tuple[float, int, list[Any]]:
    started = time.perf_counter()
    text: str | None = None
    largest = 0
    emitted: list[Any] = []
    for group in groups:
        saved = None if text is None else loads(text)
        windows = LateWindows.load(spec, LATENESS, Report(), saved)
        planned = windows.plan([group])
        emitted += windows.settle(planned, ["<r/>"] * len(planned.computations)).emissions
        text = codec(windows)
        largest = max(largest, len(text))
    return time.perf_counter() - started, largest, emitted


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--group", type=int, default=500, help="items per poll")
    args = parser.parse_args()
    groups = polls(args.items, args.group)
    for name, spec in SHAPES.items():
        now, now_size, now_out = run(spec, groups, now_codec, orjson.loads)
        before, before_size, before_out = run(spec, groups, before_codec, json.loads)
        print(
            f"{name:>8}: now {args.items / now:9,.0f} items/s, state {now_size / 1e6:.1f} MB;"
            f" before {args.items / before:9,.0f} items/s, state {before_size / 1e6:.1f} MB;"
            f" {before / now:.1f}x; same windows: {now_out == before_out}"
        )


if __name__ == "__main__":
    main()
