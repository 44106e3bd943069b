#!/usr/bin/env python3
"""Benchmark: a join over 24h windows and a tumbling-window digest, the reference
evaluator vs Spark, side by side.

Generates two feeds of N items each (default 50,000) spread over ~30 days; about
half of A's items repeat the link of a B item published within a day of them (the
same story in two feeds).  Then runs the inner join

    join: {left: {window: {from: A, time: 24h}}, right: {window: {from: B, time: 24h}},
           on: "$i1/link = $i2/link"}

and a digest of both feeds per hour (one xquery/digest.xq item per tumbling window)

    aggregate: {from: {window: {from: {union: [A, B]}, time: 1h, every: 1h}},
                reduce: xquery/digest.xq}

through roses_app.replay.run_reference and run_spark, each engine and query in a
process of its own, and prints items/s, the peak memory of each and the ratios.  Both engines
pair items by the predicate's equi-join key (roses_app.algebra.plan.equikeys) and check
the whole predicate on those candidates only.  Peak memory is sampled every 0.1 s
from /proc: the engine's process (the driver), the JVM and Spark's Python workers.
Spark gets a warm-up run on 2,000 events first (not counted).  Figures depend on the
machine (2 cores here); quote a second run.

    .venv/bin/python benchmarks/bench_algebra.py [--items 50000] [--days 30] [--query join digest]

Backs: docs/benchmarks.md, 'The commands' (24h-window join and hourly digest: items/s
and peak memory, reference vs Spark); no page quotes its figures.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from benchlib import Row, bench_parser, fill_defaults, repeated, report, work_folder
from proctree import PeakSampler, command_name

HOUR = 3_600_000_000  # µs
START = 1_717_200_000_000_000  # 2024-06-01, µs since the epoch
HEAD = """
settings: {{data_dir: {data}, spark: {{master: "local[2]", shuffle_partitions: 2}}}}
sources:
  A: {{feed: "file:A.xml"}}
  B: {{feed: "file:B.xml"}}
streams:
"""
QUERIES = {
    "join": """
  join:
    join:
      left: {{window: {{from: A, time: 24h}}}}
      right: {{window: {{from: B, time: 24h}}}}
      on: "$i1/link = $i2/link"
""",
    "digest": """
  digest:
    aggregate:
      from: {{window: {{from: {{union: [A, B]}}, time: 1h, every: 1h}}}}
      reduce: {xquery}/digest.xq
""",
}
XQUERY_DIR = Path(__file__).resolve().parent.parent / "xquery"
WORDS = ["volcano", "eruption", "football", "election", "market"]
WORDS += ["storm", "lava", "climate", "match", "vote"]


# -- input -----------------------------------------------------------------------------


def _item(rng: random.Random, name: str, link: str) -> str:
    title = " ".join(rng.choice(WORDS) for _ in range(6))
    return (
        f"<item><title>{title}</title><link>{link}</link><guid>{name}</guid>"
        f"<description>{name}: {title}, {' '.join(rng.choice(WORDS) for _ in range(20))}"
        f"</description><category>{rng.choice(WORDS)}</category></item>"
    )


def generate(path: Path, n: int, days: int, seed: int = 11) -> None:
    """A and B, n items each; a heartbeat two days after the last closes every window."""
    rng = random.Random(seed)
    span = days * 24 * HOUR
    b_times = sorted(START + rng.randrange(span) for _ in range(n))
    events = [
        (t, "B", _item(rng, f"b{j}", f"https://b.example/{j}")) for j, t in enumerate(b_times)
    ]
    for i in range(n):
        t = START + rng.randrange(span)
        link = f"https://a.example/{i}"
        if rng.random() < 0.5:  # the same story as a B item of the day around
            low = bisect.bisect_left(b_times, t - 23 * HOUR)
            high = bisect.bisect_right(b_times, t + 23 * HOUR)
            if high > low:
                link = f"https://b.example/{rng.randrange(low, high)}"
        events.append((t, "A", _item(rng, f"a{i}", link)))
    events.sort(key=lambda e: e[0])
    with open(path, "w") as fh:
        for t, source, item in events:
            fh.write(json.dumps({"source": source, "ts": t, "item": item}) + "\n")
        fh.write(json.dumps({"ts": events[-1][0] + 48 * HOUR, "item": None}) + "\n")


# -- memory ----------------------------------------------------------------------------


KINDS = ("driver", "jvm", "workers")


def _kind(pid: int) -> str:
    """Of this process's tree: driver (itself), jvm, or workers (Spark's Python
    workers); "" when it is gone."""
    if pid == os.getpid():
        return "driver"
    command = command_name(pid)
    if not command:
        return ""
    return "jvm" if command == "java" else "workers"


# -- one engine, in its own process ----------------------------------------------------


def run_engine(engine: str, work: Path, query: str) -> dict[str, object]:
    from roses_app.config import load_config
    from roses_app.replay import read_events, run_reference, run_spark, write_outputs

    config = load_config(work / f"{query}.yaml")
    events = read_events(work / "events.jsonl")
    if engine == "spark":
        warm = read_events(work / "warm-up.jsonl")
        run_spark(config, warm)  # the JVM, JIT and Python workers: not counted
    with PeakSampler(os.getpid(), every=0.1, kind=_kind) as memory:
        started = time.perf_counter()
        run = run_spark if engine == "spark" else run_reference
        outputs = run(config, events)
        seconds = time.perf_counter() - started
    peaks = {kind: memory.peaks.get(kind, 0) for kind in KINDS}
    write_outputs(outputs, work / f"out-{query}-{engine}", events.iso_times)
    items = sum(1 for e in events.events if e.item is not None)
    results = len(outputs[query][""])
    figures = {"engine": engine, "seconds": seconds, "items": items, "pairs": results}
    return {**figures, **peaks, "total": memory.peak}


def _spawn(engine: str, work: Path, query: str) -> dict[str, object]:
    command = [sys.executable, __file__, "--engine", engine, "--work", str(work)]
    command += ["--query", query]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{engine} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(value: object) -> float | None:
    return int(value) / 2**20 if isinstance(value, int) and value else None


def query_rows(query: str, results: list[dict[str, object]], same: bool) -> list[Row]:
    """A row per engine: items/s, seconds, outputs, peak memory (MB) of each kind."""
    rows: list[Row] = []
    for r in results:
        seconds = float(str(r["seconds"]))
        rows.append({
            "query": query,
            "engine": r["engine"],
            "items/s": round(int(str(r["items"])) / seconds),
            "s": seconds,
            "outputs": r["pairs"],
            **{f"peak MB {k}": _mb(r[k]) for k in (*KINDS, "total")},
            "identical outputs": same,
        })  # fmt: skip
    return rows


def measure(work: Path, queries: list[str]) -> list[Row]:
    rows: list[Row] = []
    for query in queries:
        results = [_spawn(engine, work, query) for engine in ("reference", "spark")]
        ours, theirs = work / f"out-{query}-reference", work / f"out-{query}-spark"
        same = ours.is_dir() and all(
            (ours / p.name).read_bytes() == p.read_bytes() for p in theirs.glob("*.jsonl")
        )
        rows += query_rows(query, results, same)
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items per feed (default 50,000; --quick 300)")
    parser.add_argument("--days", type=int, help="days (default 30; --quick 3)")
    parser.add_argument("--query", nargs="+", choices=tuple(QUERIES), default=list(QUERIES))
    parser.add_argument("--engine", choices=("reference", "spark"), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    fill_defaults(args, {"items": (300, 50_000), "days": (3, 30)})
    if args.engine:  # a child: one engine, its figures as the last line
        print(json.dumps(run_engine(args.engine, args.work, args.query[0])))
        return
    with work_folder("roses-bench-join-", False) as work:
        for query, text in QUERIES.items():
            config = (HEAD + text).format(data=work / "data", xquery=XQUERY_DIR)
            (work / f"{query}.yaml").write_text(config)
        generate(work / "events.jsonl", args.items, args.days)
        lines = (work / "events.jsonl").read_text().splitlines(keepends=True)
        (work / "warm-up.jsonl").write_text("".join(lines[:2000]))
        runs = repeated(args, lambda: measure(work, args.query))
    report(
        args,
        f"A 24h-window join and an hourly digest: {2 * args.items:,} items over "
        f"{args.days} days, the reference evaluator vs Spark",
        runs,
    )


if __name__ == "__main__":
    main()
