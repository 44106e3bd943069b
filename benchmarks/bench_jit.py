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

    .venv/bin/python benchmarks/bench_jit.py [--items 100000] [--subs 1] [--repeat 2] [--once]

Backs: docs/getting-started.md, 'What the scripts set up' (C1-only compilation for
finite runs: the cold replay, `roses once` and warm passes), and the comment on it in
roses_app/spark/session.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib import (
    Row,
    Section,
    bench_parser,
    fill_defaults,
    report,
    with_spark_setting,
    work_folder,
)
from coldruns import add_cold_arguments, as_is, cold, cold_title, fill_cold_defaults, generated

MODES = ("C1 only", "tiered")


def tiered_copy(config: Path) -> Path:
    """``config`` with the daemon's JVM options given in ``settings.spark.conf``."""
    from roses_app.spark.session import LOG4J_CONFIG

    options = f"-Dlog4j.configurationFile={LOG4J_CONFIG}"
    entry = f'conf: {{"spark.driver.extraJavaOptions": "{options}"}}'
    return with_spark_setting(config, entry, f"{config.stem}-tiered.yaml")


def warm(work: Path, args: argparse.Namespace) -> list[Row]:
    config, events, _ = generated(work, args)
    rows = []
    for mode in MODES:
        command = [sys.executable, __file__, "--warm-run", mode, "--config", str(config),
                   "--events", str(events), "--warm-passes", str(args.warm_passes)]  # fmt: skip
        env = {**os.environ, "ROSES_CACHE_DIR": str(work / "cache")}
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        best, rate = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append({"JIT": mode, "best s": best, "items/s": round(rate)})
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
    print(json.dumps([best, lines / best]))


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    add_cold_arguments(parser, items=100_000)
    parser.add_argument("--warm-passes", type=int, help="default 3; --quick 1")
    for hidden in ("--warm-run", "--config", "--events"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    fill_cold_defaults(args)
    fill_defaults(args, {"warm_passes": (1, 3)})
    if args.warm_run:
        warm_run(args)
        return
    sections: list[Section] = []
    with work_folder("roses-jit-", keep=False) as work:
        print(f"working in {work}; {args.items:,} items, "
              f"{args.subs} subscription(s) and a split", file=sys.stderr)  # fmt: skip
        variants = {MODES[0]: as_is, MODES[1]: tiered_copy}
        rows, ratios = cold(work / "cold", args, variants, "JIT")
        if args.warm_passes:
            title = f"Warm, one JVM per mode, best of {args.warm_passes} passes"
            sections.append((title, [warm(work / "warm", args)]))
    report(args, cold_title(args.repeat), [rows], [ratios], sections)


if __name__ == "__main__":
    main()
