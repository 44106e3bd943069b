#!/usr/bin/env python3
"""Benchmark: a join over publication time read by N streams, this tree against a
baseline commit, side by side in one run.

Two sources, ``wire`` and ``blog``, read with ``time: published``; a stream ``pairs``,
the inner join of their 5 s windows on ``category`` (lateness 30 s); and N streams
``r0`` .. ``r{N-1}``, each an aggregate over a periodic window of ``pairs`` (10 s, 20 s,
30 s, ...: no two alike).  This tree lowers the operators over publication time that
read one another into one Spark stateful operator, each computed once; the baseline
(default 19c9b1d) computed a late operator once per reader, so the join ran N + 1
times.

--items items (default 20,000), wire and blog at random, 10 per second of ingest time,
each published 0-20 s before it arrives (out of order, within the lateness), in one of
50 categories.  For each N of --readers (default 1,4,16) it times ``roses replay
--engine spark`` in a fresh subprocess per tree (this working tree, and --baseline
checked out in a temporary git worktree), alternated, --repeat times (default 2; the
table gives the best): the engine's own time (its "replayed with spark" line) and the
subprocess's wall time.  Every run's outputs must equal, file by file, those of
``roses replay --engine reference`` with this tree (once per N); it exits 1 if not.

Figures depend on the machine (2 cores here): run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_late_graph.py [--items 20000] [--readers 1,4,16] \
        [--repeat 2] [--baseline 19c9b1d]

Backs: docs/benchmarks.md, 'The commands' (a late join read by N streams, against a
baseline commit); no page quotes its figures.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import baseline_worktree, bench_parser, fill_defaults, fmt, report, work_folder

ROOT = Path(__file__).resolve().parent.parent
S = 1_000_000  # µs
CATEGORIES = [f"c{k:02d}" for k in range(50)]
PER_SECOND = 10  # items per second of ingest time
MAX_DELAY = 20 * S  # published up to this long before it arrives
START = 60 * S  # the first ingest time (every publication time positive)

# Run in a subprocess whose sys.path starts with the tree under test (PYTHONPATH).
LAUNCH = """
import sys
import roses_app
print("roses_app from", roses_app.__file__, flush=True)
from roses_app.cli import main
sys.exit(main())
"""
ENGINE_LINE = re.compile(r"^replayed with (\w+): (\d+) output file\(s\) in .* \(([\d.]+)s\)$")

HEAD = """settings:
  data_dir: ./data
  spark: {master: "local[2]", shuffle_partitions: 2}
sources:
  wire: {feed: "file:wire.xml", time: published}
  blog: {feed: "file:blog.xml", time: published}
streams:
  pairs:
    join:
      left: {window: {from: wire, time: 5s}}
      right: {window: {from: blog, time: 5s}}
      on: "$i1/category = $i2/category"
      lateness: 30s
"""
READER = """  r{n}:
    aggregate:
      from: {{window: {{from: pairs, time: {w}s, every: {w}s}}}}
      reduce: "<item><title>{{count($items)}} pairs</title></item>"
"""


def config_text(readers: int) -> str:
    """feeds.yaml: the join and `readers` aggregates of it, each over its own period."""
    return HEAD + "".join(READER.format(n=n, w=10 * (n + 1)) for n in range(readers))


def write_events(path: Path, items: int, seed: int) -> None:
    """The replay's events: arrival order, ingest times rising, published 0-20 s before."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(items):
            ts = START + (i // PER_SECOND) * S
            source = rng.choice(("wire", "blog"))
            item = (
                f"<item><title>{source[0]}{i}</title>"
                f"<category>{rng.choice(CATEGORIES)}</category></item>"
            )
            record = {
                "source": source,
                "ts": ts,
                "published": ts - rng.randint(0, MAX_DELAY),
                "item": item,
            }
            fh.write(json.dumps(record) + "\n")


@dataclass
class Run:
    engine: float  # seconds, from the engine's "replayed with" line
    wall: float  # seconds, the subprocess
    out: Path
    origin: str  # the roses_app/__init__.py the subprocess imported


@dataclass
class Row:
    readers: int
    pairs: int  # lines of pairs.jsonl
    best: dict[tuple[str, str], float] = field(default_factory=dict)  # (tree, engine|wall)


def replay(tree: Path, folder: Path, readers: int, events: Path, engine: str) -> Run:
    """`roses replay` with `tree`'s code, its config, data and outputs in `folder`
    (made fresh)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    config = folder / "feeds.yaml"
    config.write_text(config_text(readers))
    out = folder / "out"
    command = [sys.executable, "-c", LAUNCH, "replay", "-c", str(config)]
    command += ["--events", str(events), "--engine", engine, "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
    )
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(
            f"roses replay --engine {engine} with {tree} (N = {readers}) failed "
            f"({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    lines = done.stdout.splitlines()
    origin = next(line for line in lines if line.startswith("roses_app from ")).split(" ", 2)[2]
    if not Path(origin).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the run meant for {tree} imported roses_app from {origin}")
    found = [m for m in map(ENGINE_LINE.match, lines) if m]
    if not found:
        raise SystemExit(f"no 'replayed with' line from {tree}:\n{done.stdout[-3000:]}")
    return Run(float(found[-1].group(3)), wall, out, origin)


def outputs(folder: Path) -> dict[str, bytes]:
    """Each output file's path (relative to `folder`) and contents."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def check_same(got: Path, expected: dict[str, bytes], what: str) -> None:
    """Exit 1, saying which files differ, unless `got` holds exactly `expected`."""
    mine = outputs(got)
    if mine == expected:
        return
    missing = sorted(set(expected) - set(mine))
    extra = sorted(set(mine) - set(expected))
    differ = sorted(k for k in set(mine) & set(expected) if mine[k] != expected[k])
    raise SystemExit(
        f"MISMATCH: {what} differs from the reference engine's outputs: "
        f"missing {missing}, extra {extra}, different {differ}"
    )


def bench_readers(
    trees: dict[str, Path], work: Path, events: Path, readers: int, repeat: int
) -> Row:
    """For N = readers: the reference engine's outputs (this tree), then each tree's
    Spark runs, alternated, each checked against them; the best times per tree."""
    folder = work / f"n{readers}"
    reference = replay(ROOT, folder / "reference", readers, events, "reference")
    expected = outputs(reference.out)
    row = Row(readers, expected["pairs.jsonl"].count(b"\n"))
    print(f"N = {readers}: reference engine {fmt(reference.engine)} s", flush=True)
    for k in range(repeat):
        for name, tree in trees.items():  # alternated: load drifts hit both
            run_folder = folder / f"{name}-{k}"
            got = replay(tree, run_folder, readers, events, "spark")
            check_same(got.out, expected, f"{name} tree's spark run (N = {readers}, run {k + 1})")
            shutil.rmtree(run_folder, ignore_errors=True)
            print(
                f"  {name} run {k + 1}: engine {fmt(got.engine)} s, wall {fmt(got.wall)} s "
                f"(roses_app from {got.origin})",
                flush=True,
            )
            for key, value in (("engine", got.engine), ("wall", got.wall)):
                row.best[name, key] = min(row.best.get((name, key), value), value)
    shutil.rmtree(folder, ignore_errors=True)
    return row


def table_rows(rows: list[Row], items: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in rows:
        this, base = r.best["this", "engine"], r.best["baseline", "engine"]
        out.append({
            "N readers": r.readers,
            "pairs": r.pairs,
            "this engine s": this,
            "this wall s": r.best["this", "wall"],
            "baseline engine s": base,
            "baseline wall s": r.best["baseline", "wall"],
            "ratio baseline/this (engine)": base / this,
            "items/s this": round(items / this),
            "items/s baseline": round(items / base),
        })  # fmt: skip
    return out


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    add = parser.add_argument
    add("--items", type=int, help="items (default 20,000; --quick 500)")
    add("--readers", help="comma-separated counts of readers (default 1,4,16; --quick 1)")
    add("--baseline", default="19c9b1d", help="the commit to compare with")
    add("--repeat", type=int, help="runs of each tree, the best kept (default 2; --quick 1)")
    add("--seed", type=int, default=7)
    add("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    fill_defaults(args, {"items": (500, 20_000), "readers": ("1", "1,4,16"), "repeat": (1, 2)})
    counts = [int(n) for n in args.readers.split(",") if n.strip()]

    with work_folder("roses-late-graph-", args.keep) as work:
        events = work / "events.jsonl"
        write_events(events, args.items, args.seed)
        with baseline_worktree(ROOT, args.baseline, work / "baseline") as baseline:
            trees = {"this": ROOT, "baseline": baseline}
            rows = [bench_readers(trees, work, events, n, args.repeat) for n in counts]
    report(
        args,
        f"A join over publication time read by N streams: this tree vs {args.baseline}",
        [table_rows(rows, args.items)],
        notes=[f"{args.items:,} items (wire and blog, published 0-20 s out of order, 50 "
               f"categories); best of {args.repeat}; every run's outputs equal the reference "
               "engine's (checked)."],
    )  # fmt: skip


if __name__ == "__main__":
    main()
