"""Cold runs of two variants side by side (benchmarks/bench_jit.py, bench_pydaemon.py).

Each run is a fresh process and JVM: `roses replay --engine spark` of 10 events (the
start) and of --items generated items (bench_scale's realistic workload, --subs
subscriptions and its split stream), net of the start; with --once, `roses once` over
the shipped feeds.yaml too.  A variant is a copy of the config; --repeat rounds
alternate the variants; the table gives medians and the second variant's ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from bench_service import shipped_config
from benchlib import timed
from scale_workload import config_text, generate_items, generate_subscriptions, spark_settings
from scale_workload import write_events as write_event_file

ROSES = [sys.executable, "-m", "roses_app.cli"]
PORT = 18_080  # in the copied config only: `roses once` serves nothing
Variant = Callable[[Path], Path]  # a config -> that variant's copy of it


def as_is(config: Path) -> Path:
    """The variant that runs the config as it is."""
    return config


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


def cold(work: Path, args: argparse.Namespace, variants: Mapping[str, Variant]) -> list[str]:
    """The table's rows (``| variant | start | full | net | items/s net | once |``) and
    a line of ratios, second variant / first."""
    config, events, start = generated(work, args)
    env = {**os.environ, "ROSES_CACHE_DIR": str(work / "cache")}
    configs = {mode: make(config) for mode, make in variants.items()}
    out = work / "out"

    def replay(mode: str, path: Path) -> list[str]:
        return [*ROSES, "replay", "-c", str(configs[mode]), "--events", str(path),
                "--out", str(out), "--engine", "spark"]  # fmt: skip

    first, second = variants
    timed(replay(first, start), work, env, out)  # writes the class archive
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for mode in variants:
            for name, path in (("start", start), ("full", events)):
                times.setdefault((mode, name), []).append(timed(replay(mode, path), work, env, out))
    if args.once:
        shipped = work / "shipped"
        shipped_config(shipped, PORT)
        once = {mode: make(shipped / "feeds.yaml") for mode, make in variants.items()}
        for _ in range(args.repeat):
            for mode in variants:
                command = [*ROSES, "once", "-c", str(once[mode])]
                took = timed(command, shipped, env, shipped / "data")
                times.setdefault((mode, "once"), []).append(took)
    median = {key: statistics.median(values) for key, values in times.items()}
    rows = []
    for mode in variants:
        begin, full = median[mode, "start"], median[mode, "full"]
        rate = (args.items - 10) / (full - begin)
        once_cell = f"{median[mode, 'once']:.1f} s" if args.once else "-"
        rows.append(f"| {mode} | {begin:.1f} s | {full:.1f} s | {full - begin:.1f} s "
                    f"| {rate:,.0f} | {once_cell} |")  # fmt: skip

    def ratio(name: str) -> float:
        return median[second, name] / median[first, name]

    net = [median[mode, "full"] - median[mode, "start"] for mode in (first, second)]
    line = f"\n{second} / {first}: start {ratio('start'):.2f}x, net {net[1] / net[0]:.2f}x"
    rows.append(line + (f", once {ratio('once'):.2f}x" if args.once else ""))
    return rows


def add_cold_arguments(parser: argparse.ArgumentParser, items: int) -> None:
    parser.add_argument("--items", type=int, default=items)
    parser.add_argument("--subs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--repeat", type=int, default=2, help="cold rounds (default 2)")
    parser.add_argument("--once", action="store_true", help="also `roses once` (shipped)")


def print_cold(rows: list[str], first_column: str, repeat: int) -> None:
    print(f"\ncold, medians of {repeat} rounds, each run a fresh process and JVM:\n")
    print(f"| {first_column} | start (10 events) | full | net | items/s net | once shipped |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
