#!/usr/bin/env python3
"""Benchmark: how fast can `roses replay --engine spark` be, whatever its stage does?

Issue 9's first goal is a single filter + split stream at 100,000 items/s on 2 cores:
100,000 items in at most 1.0 s of replay beyond its fixed start-up.  This bench
measures the floor under any fused stage on this machine.  It runs bench_scale's
N = 1 workload (--items realistic items over 5 sources, one filter subscription and
the split stream by first category) with work taken out of the replay, one piece at
a time, by ``benchmarks/floorpatch/sitecustomize.py`` (which every Python process of the
replay imports; ROSES itself is unchanged):

  roses                 the replay as it is
  parse only            a stage that parses each item with lxml, evaluates nothing,
                        and hands every item back as an output
  no stage work         the same without the parse: Spark reads the spool, the
                        Python workers decode its lines and hand every item back
  ... no check          and the replay does not check its events' items (XML)
  ... no output         and the stage hands back no output: nothing to collect or write
  parse, no check, no output   only the stage's decoding and lxml's parse

Each is the wall time of the replay of all items minus that of the replay of the first
--startup-items events run right after it (the fixed start-up: the JVM, the query's
start, the exit): the median of --repeat such pairs, the variants alternating, and
the best of each beside it.  It also times lxml's parse of every item
in this process: the CPU any stage that parses each item once (issue 9, item 3)
needs at least.

    .venv/bin/python benchmarks/bench_floor.py [--items 100000] [--repeat 3] [--work DIR]

Backs: docs/benchmarks.md, section 'Replay' (the paragraph on the replay's floor: net
seconds of each variant, 100,000 items on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchlib import Row, add_master_and_seed, bench_parser, fill_defaults, report, work_folder
from scale_workload import (
    config_text,
    generate_items,
    generate_subscriptions,
    spark_settings,
    write_events,
)

HERE = Path(__file__).resolve().parent
VARIANTS = [
    ("roses", ""),
    ("parse only", "stage=parse"),
    ("no stage work", "stage=none"),
    ("no stage work, no check", "stage=none,nocheck"),
    ("no stage work, no check, no output", "stage=none,nocheck,nooutput"),
    ("parse, no check, no output", "stage=parse,nocheck,nooutput"),
]
GOAL = 100_000  # items/s


def replay(config: Path, events: Path, out: Path, words: str) -> float:
    """The replay's wall time, its process's start and exit included (the replay's own
    report rounds to a tenth of a second, too coarse for these differences)."""
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, ROSES_BENCH_FLOOR=words)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE / "floorpatch"), env.get("PYTHONPATH")])
    )
    cmd = [sys.executable, "-m", "roses_app.cli", "replay", "-c", str(config)]
    cmd += ["--events", str(events), "--out", str(out), "--engine", "spark"]
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or "replayed with spark" not in done.stdout:
        sys.exit(f"replay failed ({words or 'roses'}):\n{done.stderr[-2000:]}")
    return seconds


def lxml_parse_seconds(xmls: list[str]) -> float:
    """CPU seconds of lxml's parse of every item, in this process (best of 3)."""
    from roses_app.xmlfn.xpath import parse, thread_parser

    parser = thread_parser()
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for xml in xmls:
            parse(xml, parser)
        best = min(best, time.process_time() - started)
    return best


def measure(
    work: Path, repeat: int, variants: list[tuple[str, str]]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per variant, the wall times of its replays of all items and of the start-up's."""
    config = work / "feeds.yaml"
    fulls: dict[str, list[float]] = {name: [] for name, _ in variants}
    starts: dict[str, list[float]] = {name: [] for name, _ in variants}
    for attempt in range(repeat):
        for name, words in variants:
            fulls[name].append(replay(config, work / "events.jsonl", work / "out", words))
            starts[name].append(replay(config, work / "startup.jsonl", work / "out", words))
            took = f"{fulls[name][-1]:.2f} s, start-up {starts[name][-1]:.2f} s"
            print(f"  round {attempt + 1}: {name}: {took}", file=sys.stderr)
    return fulls, starts


def rate(items: int, seconds: float) -> int | None:
    return round(items / seconds) if seconds > 0 else None


def times(values: list[float]) -> str:
    return " / ".join(f"{s:.2f}" for s in values)


def floor_report(
    args: argparse.Namespace,
    fulls: dict[str, list[float]],
    starts: dict[str, list[float]],
    parse_cpu: float,
) -> None:
    n = args.items - args.startup_items
    cores = os.cpu_count() or 1
    rows: list[Row] = []
    for name in fulls:
        # a run and the start-up run after it are close in time: their difference
        # drifts less with this machine's load than the best of each
        paired = statistics.median(f - s for f, s in zip(fulls[name], starts[name], strict=True))
        best = min(fulls[name]) - min(starts[name])
        rows.append({"replay": name, "net s (median)": paired, "items/s net": rate(n, paired),
                     "net s (best of each)": best, "items/s": rate(n, best)})  # fmt: skip
    notes = [
        "Only the first computes the streams; the others hand back every item or none.",
        f"lxml's parse of the {args.items:,} items: {parse_cpu:.2f} s of CPU in one process,"
        f" at least {parse_cpu / cores:.2f} s on {cores} cores.",
        f"{GOAL:,} items/s means a net of at most {n / GOAL:.2f} s.",
        f"{args.repeat} runs each; all times, all items (start-up):\n"
        + "\n".join(f"- {name}: {times(fulls[name])} ({times(starts[name])})" for name in fulls),
    ]
    title = f"The replay's floor: {args.items:,} items, N = 1 (filter + split), {cores} cores"
    report(args, title, [rows], notes)


def main() -> None:
    parser = bench_parser(
        __doc__,
        repeat=None,
        quick="1,000 items, one round, two variants (roses; parse, no check, no output)",
    )
    add = parser.add_argument
    add("--items", type=int, help="items (default 100,000; --quick 1,000)")
    add("--startup-items", type=int, default=10)
    add("--repeat", type=int, help="pairs of runs of each, the median kept (default 3; --quick 1)")
    add("--variants", help="the variants to run, by number: 1 (roses) to 6 (default: all)")
    add("--work", help="working folder (default: a new temporary one)")
    add("--keep", action="store_true")
    add_master_and_seed(parser)
    args = parser.parse_args()
    everyone = ",".join(str(k) for k in range(1, len(VARIANTS) + 1))
    fill_defaults(args, {"items": (1_000, 100_000), "repeat": (1, 3),
                         "variants": (f"1,{len(VARIANTS)}", everyone)})  # fmt: skip
    numbers = [int(k) for k in args.variants.split(",")]
    if not all(1 <= k <= len(VARIANTS) for k in numbers):
        parser.error(f"--variants: numbers from 1 to {len(VARIANTS)}")
    variants = [VARIANTS[k - 1] for k in numbers]

    with work_folder("roses-floor-", args.keep, args.work) as work:
        items = generate_items(args.items, args.seed)
        write_events(items, work / "events.jsonl")
        write_events(items[: args.startup_items], work / "startup.jsonl")
        subs = generate_subscriptions(1, args.seed)
        settings = spark_settings(work / "data", args.master)
        (work / "feeds.yaml").write_text(config_text(subs, work / "feeds", settings))
        fulls, starts = measure(work, args.repeat, variants)
        parse_cpu = lxml_parse_seconds([item.xml for item in items])
    floor_report(args, fulls, starts, parse_cpu)


if __name__ == "__main__":
    main()
