#!/usr/bin/env python3
"""Benchmark: a pull query for "now" of a time window, reading the spool from the
window's range on against reading it whole, side by side in one run.

Builds a spool as the daemon leaves it (``roses_app.spool.Spool``): --days days of
polls every --every minutes of --items items each, over one source read in
publication time, the committed files archived and compacted every --compact polls.
Then, for a 1-day and a 1-hour sliding window, it times ``PullQueries.answer`` at the
last time (what ``GET /streams/NAME`` and ``roses query`` run: the spool read from
the window's start less ``settings.max_future``) and the same answer from the whole
spool up to that time (what they ran before), best of --repeat, and checks that both
give the same items.  Figures depend on the machine (2 cores here) and the disk's
cache (the spool is read right after it was written).

    .venv/bin/python benchmarks/bench_pull.py [--days 30] [--every 30] [--items 100]

Backs: docs/commands.md, section 'query' (a pull query for now of a time window: the
spool read from its range against whole); its own --repeat keeps the best timing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from benchlib import Row, bench_parser, fill_defaults, report, work_folder

from roses_app.algebra.reference.pull import content_at
from roses_app.algebra.reference.registry import RefInput
from roses_app.config import load_config
from roses_app.items import MICROS, iso8601
from roses_app.publish.pull import PullQueries
from roses_app.spool import Spool
from roses_app.spoolfiles import read_spool

START = 1_793_491_200 * MICROS  # 2026-11-01T00:00:00Z
MINUTE = 60 * MICROS
CONFIG = """
settings: {data_dir: ./data}
sources:
  wire: {feed: "file:wire.xml", time: published}
streams:
  day: {window: {from: wire, time: 1d}}
  hour: {window: {from: {filter: {from: wire, where: "category = 'world'"}}, time: 1h}}
"""


def build(root: Path, days: int, every: int, per_poll: int, compact: int) -> tuple[int, int]:
    """The spool; returns the number of its events and the time of the last."""
    polls = days * 24 * 60 // every
    times = iter(START + k * every * MINUTE for k in range(polls))
    spool = Spool(root, clock=lambda: next(times))
    n = 0
    try:
        for poll in range(polls):
            at = START + poll * every * MINUTE
            items = [
                (
                    f"<item><title>Story {n + k}</title><guid>g{n + k}</guid>"
                    f"<category>{('world', 'sport', 'arts')[k % 3]}</category>"
                    f"<description>{'text ' * 40}</description></item>",
                    at - (k % 7) * MINUTE,
                )
                for k in range(per_poll)
            ]
            n += len(spool.append("wire", items))
            if (poll + 1) % compact == 0:  # what Spark's cleanSource and the daemon do
                for path in sorted(spool.log_dir.glob("*.jsonl")):
                    target = spool.archive_dir / path.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    path.rename(target)
                spool.compact(min_files=1)
    finally:
        spool.close()
    return n, START + (polls - 1) * every * MINUTE


def best(repeat: int, run: Callable[[], object]) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    parser.add_argument("--days", type=int, help="days of polls (default 30; --quick 2)")
    parser.add_argument("--every", type=int, default=30, help="minutes between polls")
    parser.add_argument("--items", type=int, default=100, help="items per poll")
    parser.add_argument("--compact", type=int, default=48, help="polls between compactions")
    parser.add_argument("--repeat", type=int, default=3, help="timings of each, best kept")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    fill_defaults(args, {"days": (2, 30)})
    rows: list[Row] = []
    with work_folder("roses-bench-pull-", args.keep) as work:
        (work / "feeds.yaml").write_text(CONFIG)
        config = load_config(work / "feeds.yaml")
        root = work / "data" / "spool"
        started = time.perf_counter()
        count, last = build(root, args.days, args.every, args.items, args.compact)
        files = len(list(root.rglob("*.jsonl")))
        built = (
            f"The spool: {count:,} events in {files} files over {args.days} days, built in "
            f"{time.perf_counter() - started:.1f}s; asked at {iso8601(last)}; best of "
            f"{args.repeat}."
        )
        pull = PullQueries(config, root)
        settings = config.settings
        for name in ("day", "hour"):
            stream = config.streams[name].stream

            def whole(stream: object = stream) -> list[tuple[int, int]]:
                inputs = [
                    RefInput(e.source, e.ts, e.seq, e.item, e.published)
                    for e in read_spool(root, until=last)
                ]
                found = content_at(stream, inputs, last, settings.namespaces)  # type: ignore[arg-type]
                return [(e.ts, e.seq) for e in found[""]]

            def ranged(name: str = name) -> list[tuple[int, int]]:
                return [(e.ts, e.seq) for e in pull.answer(name, last).entries]

            old, expected = best(args.repeat, whole)
            new, got = best(args.repeat, ranged)
            rows.append({"window": name, "items": len(got), "range read s": new,
                         "whole spool s": old, "speed-up": old / new,
                         "same items": got == expected})  # fmt: skip
    report(args, 'A pull query for "now" of a time window', [rows], notes=[built])


if __name__ == "__main__":
    main()
