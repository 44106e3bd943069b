#!/usr/bin/env python3
"""Benchmark: a cold ROSES run with and without the JVM's class archive, side by side.

Each run is a fresh process, so a fresh JVM: `roses replay --engine spark` of the
replay fixture ``spine`` (--fixture; a few events, so the time is the start) and, with
--once, `roses once` over the shipped feeds.yaml (copied with examples/ and xquery/,
fresh data folder each time).  Two copies of each config differ only in
``settings.spark.class_archive``; the archive lives in a fresh ``$ROSES_CACHE_DIR`` per
case.
First the run that writes the archive (its exit writes it: timed apart), then
--repeat rounds alternating without / with, and the table gives median and best.

Figures depend on the machine (2 cores here): run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_jvm_start.py [--repeat 5] [--once]

Backs: docs/getting-started.md, 'What the scripts set up' (the class archive's seconds
saved at start-up), as docs/benchmarks.md's 'Figures on other pages' says.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench_service import shipped_config
from benchlib import Row, bench_parser, fill_defaults, report, timed, with_spark_setting

ROOT = Path(__file__).resolve().parent.parent
ROSES = [sys.executable, "-m", "roses_app.cli"]
PORT = 18_080  # in the copied config only: `roses once` serves nothing


def with_archive(config: Path, on: bool) -> Path:
    """A copy of ``config`` beside it with ``settings.spark.class_archive`` set."""
    value, name = ("true", "feeds-on.yaml") if on else ("false", "feeds-off.yaml")
    return with_spark_setting(config, f"class_archive: {value}", name)


def cases(work: Path, fixture: str, once: bool) -> dict[str, tuple[list[str], Path, Path | None]]:
    """name -> (command without the config, folder, data folder to clear)."""
    replay = work / "replay"
    shutil.copytree(ROOT / "tests" / "data" / "replay" / fixture, replay)
    found: dict[str, tuple[list[str], Path, Path | None]] = {}
    events = str(replay / "events.jsonl")
    found[f"replay {fixture}"] = (
        ["replay", "--events", events, "--out", str(work / "out"), "--engine", "spark"],
        replay,
        None,
    )
    if once:
        shipped = work / "shipped"
        shipped_config(shipped, PORT)  # bench_service's copy: examples/, xquery/, data_dir
        found["once shipped feeds.yaml"] = (["once"], shipped, shipped / "data")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__, repeat=None)
    add = parser.add_argument
    add("--repeat", type=int, help="rounds of each, medians and spread (default 5; --quick 1)")
    add("--fixture", default="spine", help="replay fixture (default spine)")
    add("--once", action="store_true", help="also `roses once` (shipped)")
    args = parser.parse_args(argv)
    fill_defaults(args, {"repeat": (1, 5)})
    work = Path(tempfile.mkdtemp(prefix="roses-jvm-start-"))
    print(f"working in {work}", file=sys.stderr)
    rounds: list[list[Row]] = [[] for _ in range(args.repeat)]  # a run per round
    try:
        for n, (name, (command, folder, data)) in enumerate(
            cases(work, args.fixture, args.once).items()
        ):
            cache = work / f"cache-{n}"  # each case writes its own archive first
            env = {**os.environ, "ROSES_CACHE_DIR": str(cache)}
            configs = {on: with_archive(folder / "feeds.yaml", on) for on in (False, True)}
            runs = {on: [*ROSES, *command, "-c", str(configs[on])] for on in (False, True)}
            writing = timed(runs[True], folder, env, data)  # no archive yet: writes it
            size = sum(p.stat().st_size for p in cache.rglob("*.jsa"))
            for k in range(args.repeat):
                off, on = (timed(runs[on], folder, env, data) for on in (False, True))
                rounds[k].append({"run": name, "without archive s": off, "with archive s": on,
                                  "speed-up": off / on, "run writing it s": writing,
                                  "archive MB": round(size / 1e6)})  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    title = f"A cold run with and without the JVM's class archive, {args.repeat} round(s)"
    report(args, title, rounds, notes=["Each run a fresh process and JVM."])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
