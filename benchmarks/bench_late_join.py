#!/usr/bin/env python3
"""Benchmark: a join over publication time on ``$i1/link = $i2/link``, the operator's
hash join on its keys against testing ``on`` on every pair in the windows, one run.

Two sources (a wire and the blogs that link to its stories) publish --items items in
all over --hours hours, in polls every 5 minutes, each item up to 10 minutes late;
a blog item links to a wire story of the last hours half of the time.  The join's
sides are 24-hour sliding windows, its lateness an hour.  Both variants run what the
Spark operator runs each micro-batch (``roses_app.xmlfn.pairs``: advance, ``on``,
composition, settle; the state through JSON in between), one poll per micro-batch:

  keyed   an item meets the kept items of the other side sharing its link
  all     an item meets every kept item in the windows; ``on`` (elementpath) tests
          each pair (what the operator did before)

and it prints items/s, the pairs tested, the joined items (which must be equal) and
the largest state.  Figures depend on the machine (2 cores here).

    .venv/bin/python benchmarks/bench_late_join.py [--items 4000] [--hours 24]

Backs: docs/event-time.md, the join over publication time (the keyed hash join's
speed-up over testing `on` on every pair).
"""

from __future__ import annotations

import json
import random
import time

from benchlib import Row, bench_parser, fill_defaults, repeated, report

from roses_app.algebra.plan.operators import Join, Source, TimeWindow
from roses_app.algebra.time.latejoin import LEFT, RIGHT, LateJoin, join_keyed
from roses_app.algebra.time.lateness import arrival_groups
from roses_app.algebra.time.panes import Arrival
from roses_app.xmlfn.pairs import advance_join, late_join_results

S = 1_000_000
HOUR = 3600 * S
DAY = TimeWindow(24 * HOUR)
NODE = Join(
    Source("wire", time="published"),
    Source("blogs", time="published"),
    "inner",
    "$i1/link = $i2/link",
    lateness=HOUR,
)


def polls(items: int, hours: int, seed: int = 7) -> list[list[tuple[int, Arrival]]]:
    rng = random.Random(seed)
    count = hours * 12
    per = max(1, items // count)
    out, stories = [], []
    for p in range(count):
        ingest = p * 300 * S
        group = []
        for k in range(per):
            seq = p * per + k + 1
            when = ingest - rng.randint(0, 600 * S)
            if k % 2 == 0:
                stories.append(seq)
                link = f"https://wire.example/{seq}"
                side = LEFT
            else:
                recent = stories[-60:]
                cited = rng.choice(recent) if recent and rng.random() < 0.5 else -seq
                link = f"https://wire.example/{cited}"
                side = RIGHT
            text = f"<item><title>{seq}</title><link>{link}</link><guid>g{seq}</guid></item>"
            group.append((ingest, Arrival(when, seq, text, side)))
        out.append(group)
    return out


def run(groups: list[list[tuple[int, Arrival]]], keyed: bool) -> tuple[float, int, list, int]:  # type: ignore[type-arg]
    started = time.perf_counter()
    saved = None
    tested, joined, largest = 0, [], 0
    for group in groups:
        join = LateJoin.load(DAY, DAY, HOUR, "inner", saved, keyed=keyed)
        planned = advance_join(NODE, join, arrival_groups(group), ())
        tested += len(planned.pairs)
        joined += late_join_results(NODE, join, planned, ())[0]
        text = json.dumps(join.dump())
        largest = max(largest, len(text))
        saved = json.loads(text)
    return time.perf_counter() - started, tested, sorted(joined), largest


def measure(groups: list[list[tuple[int, Arrival]]]) -> list[Row]:
    """Both variants over the same polls: a row each."""
    total = sum(len(g) for g in groups)
    rows: list[Row] = []
    outputs = []
    for label, keyed in (("keyed", True), ("all", False)):
        took, pairs, out, size = run(groups, keyed=keyed)
        outputs.append(out)
        rows.append({"variant": label, "items/s": round(total / took), "pairs tested": pairs,
                     "joined": len(out), "state MB": size / 1e6, "s": took})  # fmt: skip
    same = outputs[0] == outputs[1]  # must be True: both join the same pairs
    for row in rows:
        row["same joined items"] = same
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 4,000; --quick 400)")
    parser.add_argument("--hours", type=int, help="hours (default 24; --quick 4)")
    args = parser.parse_args()
    fill_defaults(args, {"items": (400, 4000), "hours": (4, 24)})
    assert join_keyed(NODE)
    groups = polls(args.items, args.hours)
    total = sum(len(g) for g in groups)
    runs = repeated(args, lambda: measure(groups))
    rows = runs[0]
    report(
        args,
        f"A join over publication time: {total:,} items in {len(groups)} polls over "
        f"{args.hours} h, 24 h windows",
        runs,
        notes=[f"keyed / all: {rows[1]['s'] / rows[0]['s']:.1f}x faster"],
    )


if __name__ == "__main__":
    main()
