#!/usr/bin/env python3
"""Benchmark: `roses replay`, Spark vs the reference engine, side by side.

Generates N items (default 100,000) over two sources, then times both engines on the
same event file in one run, for a filter + split configuration (XPath) and a filter +
XQuery mutator one, and prints items/s and the ratio: a first pass (Spark's JVM and
Python workers warmed on 2,000 items only, as a `roses replay` of a large file
meets them), then --again more passes in the same process (the best is shown: the
JVM's JIT has compiled its hot paths, as in a daemon that has run a while).  Figures
depend on the machine (2 cores here); run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_replay.py [--items 100000]

Backs: docs/benchmarks.md, 'The commands' (replay: Spark vs the reference engine, a
first pass and again); the figures of section 'Replay' are bench_scale.py's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

from benchlib import Row, bench_parser, fill_defaults, repeated, report, work_folder

HEAD = """
settings: {{data_dir: {data}, spark: {{master: "local[2]", shuffle_partitions: 2}}}}
sources:
  wire: {{feed: "file:wire.xml"}}
  blog: {{feed: "file:blog.xml"}}
streams:"""
CONFIGS = {
    # issue 2: a filter and a split (XPath observers and a split function)
    "filter+split": """
  volcano:
    filter: {{from: wire, where: "contains(lower-case(title), 'volcano')"}}
  topics:
    split: {{from: {{union: [wire, blog]}}, by: "string(category[1])"}}
""",
    # issue 3: a filter (lxml fast path) then an XQuery mutator (Saxon, batched)
    "filter+mutator": """
  tagged:
    map:
      from: {{filter: {{from: {{union: [wire, blog]}}, where: "category = ('world', 'science')"}}}}
      xquery: {xquery}
""",
}

WORDS = ["volcano", "eruption", "football", "election", "market"]
WORDS += ["storm", "lava", "climate", "match", "vote"]
CATEGORIES = ["world", "sport", "science", "politics", "business"]


def generate(path: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    with open(path, "w") as fh:
        for i in range(n):
            title = " ".join(rng.choice(WORDS) for _ in range(5))
            item = (
                f"<item><title>{title}</title><link>https://example.org/{i}</link>"
                f"<description>Item {i} about {title}</description><guid>g{i}</guid>"
                f"<category>{rng.choice(CATEGORIES)}</category></item>"
            )
            record = {"source": "wire" if i % 2 else "blog", "ts": i // 10, "item": item}
            fh.write(json.dumps(record) + "\n")


def measure(work: Path, events: Path, args: argparse.Namespace) -> list[Row]:
    """Each configuration: Spark warmed up, then both engines' passes; a row per pass
    kind (first, again: the best of --again)."""
    from roses_app.config import load_config
    from roses_app.replay import replay
    from roses_app.spark.session import build_session

    xquery = Path(__file__).resolve().parent.parent / "xquery" / "tag-topics.xq"
    rows: list[Row] = []
    for name, template in CONFIGS.items():
        if args.only and name != args.only:
            continue
        folder = work / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        config_text = (HEAD + template).format(data=folder / "data", xquery=xquery)
        (folder / "feeds.yaml").write_text(config_text)
        config = load_config(folder / "feeds.yaml")
        started = time.perf_counter()
        build_session(config.settings.spark, work / "cache")
        warm = folder / "warm-up.jsonl"
        warm.write_text("".join(events.read_text().splitlines(keepends=True)[:2000]))
        replay(config, warm, folder / "out-warm-up", "spark")  # JIT and Python workers
        elapsed = time.perf_counter() - started
        print(f"== {name}: Spark ready and warm in {elapsed:.1f}s (not counted)", file=sys.stderr)
        rates: dict[tuple[str, str], float] = {}
        for engine in ("reference", "spark"):
            for when in ("first", *["again"] * args.again):
                started = time.perf_counter()
                replay(config, events, folder / f"out-{engine}", engine)
                rate = args.items / (time.perf_counter() - started)
                rates[engine, when] = max(rate, rates.get((engine, when), 0.0))
        same = all(
            (folder / "out-reference" / p.relative_to(folder / "out-spark")).read_bytes()
            == p.read_bytes()
            for p in (folder / "out-spark").rglob("*.jsonl")
        )
        for when in ("first", "again") if args.again else ("first",):
            spark, reference = rates["spark", when], rates["reference", when]
            rows.append(
                {
                    "configuration": name,
                    "pass": when if when == "first" else "again, best",
                    "reference items/s": round(reference),
                    "spark items/s": round(spark),
                    "spark / reference": spark / reference,
                    "identical outputs": same,
                }
            )
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 100,000; --quick 1,000)")
    parser.add_argument("--only", choices=sorted(CONFIGS), help="run one configuration")
    parser.add_argument("--again", type=int, help="passes after the first (default 2; --quick 0)")
    args = parser.parse_args()
    fill_defaults(args, {"items": (1_000, 100_000), "again": (0, 2)})
    with work_folder("roses-bench-", False) as work:
        events = work / "events.jsonl"
        generate(events, args.items)
        runs = repeated(args, lambda: measure(work, events, args))
    report(args, f"roses replay, Spark vs the reference engine: {args.items:,} items", runs)


if __name__ == "__main__":
    main()
