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
from benchlib import Row, fill_defaults, timed
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


def cold(
    work: Path, args: argparse.Namespace, variants: Mapping[str, Variant], first_column: str
) -> tuple[list[Row], str]:
    """The table's rows (variant, start, full, net, items/s net, once: medians of the
    rounds) and a line of ratios, second variant / first."""
    config, events, start = generated(work, args)
    env = {**os.environ, "ROSES_CACHE_DIR": str(work / "cache")}
    configs = {mode: make(config) for mode, make in variants.items()}
    out = work / "out"

    def replay(mode: str, path: Path) -> list[str]:
        return [*ROSES, "replay", "-c", str(configs[mode]), "--events", str(path),
                "--out", str(out), "--engine", "spark"]  # fmt: skip

    first, second = variants
    if not args.quick:  # a smoke run spares this JVM: its first run writes the archive
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
    rows: list[Row] = []
    for mode in variants:
        begin, full = median[mode, "start"], median[mode, "full"]
        rate = (args.items - 10) / (full - begin) if full > begin else None
        rows.append({first_column: mode, "start (10 events) s": begin, "full s": full,
                     "net s": full - begin, "items/s net": None if rate is None else round(rate),
                     "once shipped s": median[mode, "once"] if args.once else None})  # fmt: skip

    def ratio(name: str) -> float:
        return median[second, name] / median[first, name]

    net = [median[mode, "full"] - median[mode, "start"] for mode in (first, second)]
    net_ratio = f"{net[1] / net[0]:.2f}x" if net[0] > 0 else "-"
    line = f"{second} / {first}: start {ratio('start'):.2f}x, net {net_ratio}"
    return rows, line + (f", once {ratio('once'):.2f}x" if args.once else "")


def add_cold_arguments(parser: argparse.ArgumentParser, items: int) -> None:
    """The options of cold runs; --quick: 1,000 items, one round, no run before."""
    parser.add_argument("--items", type=int, help=f"items (default {items:,}; --quick 1,000)")
    parser.add_argument("--subs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--repeat", type=int, help="cold rounds, medians kept (default 2; --quick 1)"
    )
    parser.add_argument("--once", action="store_true", help="also `roses once` (shipped)")
    parser.set_defaults(full_items=items)


def fill_cold_defaults(args: argparse.Namespace) -> None:
    fill_defaults(args, {"items": (1_000, args.full_items), "repeat": (1, 2)})


def cold_title(repeat: int) -> str:
    return f"Cold runs, medians of {repeat} rounds, each a fresh process and JVM"
