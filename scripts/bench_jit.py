#!/usr/bin/env python3
"""Benchmark: the JVM's JIT of a finite run, C1 only (what `roses once`, `replay` and
`explain` start) against tiered compilation (C1 then C2, the JVM's default, what
`roses run` starts), side by side in one run.

Cold, each run a fresh process and JVM (the class archive written first, then mapped
by both): `roses replay --engine spark` of 10 events (the start) and of --items
generated items (bench_scale's realistic workload, --subs subscriptions and its split
stream), net of the start; with --once, `roses once` over the shipped feeds.yaml too.
The tiered runs get a copy of the config whose ``settings.spark.conf`` gives the
driver the JVM options a daemon gets.  --repeat rounds alternate the two; medians.

Warm (--warm-passes, default 3; 0: none): in one process per mode, the same replay
again and again in one JVM, as a daemon that has run a while: the best pass.

Figures depend on the machine (2 cores here): run it twice and quote the second run.

    .venv/bin/python scripts/bench_jit.py [--items 100000] [--subs 1] [--repeat 2] [--once]
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

from bench_service import shipped_config
from benchlib import argument_parser, timed, with_spark_setting, work_folder
from scale_workload import config_text, generate_items, generate_subscriptions, spark_settings
from scale_workload import write_events as write_event_file

ROSES = [sys.executable, "-m", "roses_app.cli"]
PORT = 18_080  # in the copied config only: `roses once` serves nothing
MODES = ("C1 only", "tiered")


def tiered_copy(config: Path) -> Path:
    """``config`` with the daemon's JVM options given in ``settings.spark.conf``."""
    from roses_app.spark.session import LOG4J_CONFIG

    options = f"-Dlog4j.configurationFile={LOG4J_CONFIG}"
    entry = f'conf: {{"spark.driver.extraJavaOptions": "{options}"}}'
    return with_spark_setting(config, entry, "feeds-tiered.yaml")


def generated(work: Path, args: argparse.Namespace) -> tuple[Path, Path, Path]:
    """The replay's config, its full events file and a 10-event one."""
    work.mkdir(parents=True, exist_ok=True)
    items = generate_items(args.items, args.seed)
    events, start = work / "events.jsonl", work / "start.jsonl"
    write_event_file(items, events)
    write_event_file(items[:10], start)
    subs = generate_subscriptions(args.subs, args.seed)
    config = work / "feeds.yaml"
    config.write_text(config_text(subs, work, spark_settings(work / "data", "local[2]")))
    return config, events, start


def cold(work: Path, args: argparse.Namespace) -> list[str]:
    config, events, start = generated(work, args)
    env = {**os.environ, "ROSES_CACHE_DIR": str(work / "cache")}
    configs = {MODES[0]: config, MODES[1]: tiered_copy(config)}
    out = work / "out"

    def replay(mode: str, path: Path) -> list[str]:
        return [*ROSES, "replay", "-c", str(configs[mode]), "--events", str(path),
                "--out", str(out), "--engine", "spark"]  # fmt: skip

    timed(replay(MODES[0], start), work, env, out)  # writes the class archive
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for mode in MODES:
            for name, path in (("start", start), ("full", events)):
                times.setdefault((mode, name), []).append(timed(replay(mode, path), work, env, out))
    if args.once:
        shipped = work / "shipped"
        shipped_config(shipped, PORT)
        once = {MODES[0]: shipped / "feeds.yaml", MODES[1]: tiered_copy(shipped / "feeds.yaml")}
        for _ in range(args.repeat):
            for mode in MODES:
                command = [*ROSES, "once", "-c", str(once[mode])]
                took = timed(command, shipped, env, shipped / "data")
                times.setdefault((mode, "once"), []).append(took)
    median = {key: statistics.median(values) for key, values in times.items()}
    rows = []
    for mode in MODES:
        begin, full = median[mode, "start"], median[mode, "full"]
        rate = (args.items - 10) / (full - begin)
        once_cell = f"{median[mode, 'once']:.1f} s" if args.once else "-"
        rows.append(f"| {mode} | {begin:.1f} s | {full:.1f} s | {full - begin:.1f} s "
                    f"| {rate:,.0f} | {once_cell} |")  # fmt: skip
    c1, tiered = (median[m, "full"] - median[m, "start"] for m in MODES)
    rows.append(f"\nnet time, tiered / C1 only: {tiered / c1:.2f}x; start: "
                f"{median[MODES[1], 'start'] / median[MODES[0], 'start']:.2f}x")  # fmt: skip
    return rows


def warm(work: Path, args: argparse.Namespace) -> list[str]:
    config, events, _ = generated(work, args)
    rows = []
    for mode in MODES:
        command = [sys.executable, __file__, "--warm-run", mode, "--config", str(config),
                   "--events", str(events), "--warm-passes", str(args.warm_passes)]  # fmt: skip
        env = {**os.environ, "ROSES_CACHE_DIR": str(work / "cache")}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        rows.append(f"| {mode} | {done.stdout.strip()} |")
    return rows


def warm_run(args: argparse.Namespace) -> None:
    """One mode's warm passes, in this process (its JVM started as that mode's)."""
    from roses_app.config import load_config
    from roses_app.replay import replay
    from roses_app.spark.session import build_session

    config = load_config(Path(args.config))
    build_session(config.settings.spark, Path(args.config).parent / "cache",
                  finite=args.warm_run == MODES[0])  # fmt: skip
    events = Path(args.events)
    warm_up = events.with_name("warm-up.jsonl")
    warm_up.write_text("".join(events.read_text().splitlines(keepends=True)[:2000]))
    out = events.with_name(f"out-{os.getpid()}")
    replay(config, warm_up, out, "spark")
    best = float("inf")
    for _ in range(args.warm_passes):
        started = time.perf_counter()
        replay(config, events, out, "spark")
        best = min(best, time.perf_counter() - started)
    shutil.rmtree(out, ignore_errors=True)
    lines = sum(1 for _ in events.open())
    print(f"{best:.1f} s | {lines / best:,.0f}")


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--subs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=2, help="cold rounds (default 2)")
    parser.add_argument("--once", action="store_true", help="also `roses once` (shipped)")
    parser.add_argument("--warm-passes", type=int, default=3)
    for hidden in ("--warm-run", "--config", "--events"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_run:
        warm_run(args)
        return
    with work_folder("roses-jit-", keep=False) as work:
        print(f"working in {work}; nproc {os.cpu_count()}; {args.items:,} items, "
              f"{args.subs} subscription(s) and a split")  # fmt: skip
        table = cold(work / "cold", args)
        print(f"\ncold, medians of {args.repeat} rounds, each run a fresh process and JVM:\n")
        print("| JIT | start (10 events) | full | net | items/s net | once shipped |")
        print("|---|---|---|---|---|---|")
        print("\n".join(table))
        if args.warm_passes:
            print(f"\nwarm, one JVM per mode, best of {args.warm_passes} passes:\n")
            print("| JIT | time | items/s |\n|---|---|---|")
            print("\n".join(warm(work / "warm", args)))


if __name__ == "__main__":
    main()
