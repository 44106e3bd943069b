#!/usr/bin/env python3
"""Benchmark: `roses replay` of a filter + split stream, Spark vs the reference engine.

Generates N items (default 100,000) over two sources, then times both engines on the
same event file in one run and prints items/s and the ratio.  Figures depend on the
machine (2 cores here); run it twice and quote the second run.

    .venv/bin/python scripts/bench_replay.py [--items 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

CONFIG = """
settings: {{data_dir: {data}, spark: {{master: "local[2]", shuffle_partitions: 2}}}}
sources:
  wire: {{feed: "file:wire.xml"}}
  blog: {{feed: "file:blog.xml"}}
streams:
  volcano:
    filter: {{from: wire, where: "contains(lower-case(title), 'volcano')"}}
  topics:
    split: {{from: {{union: [wire, blog]}}, by: "string(category[1])"}}
"""

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100_000)
    args = parser.parse_args()

    from roses_app.config import load_config
    from roses_app.replay import replay

    work = Path(tempfile.mkdtemp(prefix="roses-bench-"))
    (work / "feeds.yaml").write_text(CONFIG.format(data=work / "data"))
    events = work / "events.jsonl"
    generate(events, args.items)
    config = load_config(work / "feeds.yaml")

    from roses_app.spark.session import build_session

    started = time.perf_counter()
    build_session(config.settings.spark, work / "cache")
    print(f"Spark session start: {time.perf_counter() - started:.1f}s (not counted below)")

    rates: dict[str, float] = {}
    for engine in ("reference", "spark"):
        started = time.perf_counter()
        replay(config, events, work / f"out-{engine}", engine)
        elapsed = time.perf_counter() - started
        rates[engine] = args.items / elapsed
        print(f"{engine:>9}: {args.items} items in {elapsed:6.1f}s = {rates[engine]:8.0f} items/s")
    same = all(
        (work / "out-reference" / p.relative_to(work / "out-spark")).read_bytes() == p.read_bytes()
        for p in (work / "out-spark").rglob("*.jsonl")
    )
    print(
        f"spark / reference: {rates['spark'] / rates['reference']:.2f}x; identical outputs: {same}"
    )


if __name__ == "__main__":
    main()
