#!/usr/bin/env python3
"""Benchmark: the XML item functions on generated items, outside Spark.

Prints side by side, on N generated items (default 100,000) cut into batches as a
Spark worker gets them (default 10,000):

* an XPath observer (filter) on lxml's fast path vs on elementpath (the same
  expression, with the fast path turned off), items/s and the ratio;
* an XQuery mutator run by Saxon over whole batches vs one Saxon call per item
  (timed on a sample, default 2,000 items), items/s and the ratio; for a simple
  mutator (adds one element) and for the shipped ``xquery/tag-topics.xq``;
* the same batches shared with helper processes (``--processes``, default 2; see
  ``roses_app.xmlfn.xqpool``) vs one process.

Every figure includes parsing the serialized items and serializing the results.
Apart from the helper processes it runs on one core (one thread).  Figures depend on
the machine, and on what else runs on it: run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_xmlfn.py [--items 100000] [--batch 10000] [--processes 2]

Backs: docs/benchmarks.md, 'The commands' (XPath fast path, XQuery batched vs per
item, 1 vs 2 processes); no page quotes its figures.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import Row, bench_parser, fill_defaults, repeated, report  # noqa: E402

from roses_app.algebra.plan.operators import XQuery  # noqa: E402
from roses_app.xmlfn import filter_batch, mutate_batch, uses_fast_path, xqpool  # noqa: E402

WORDS = (
    *("volcano", "eruption", "lava", "iceland", "football", "election", "vote", "climate"),
    *("science", "research", "market", "city", "river", "storm", "council", "minister"),
    *("court", "school", "hospital", "bridge", "train"),
)
CATEGORIES = ("iceland", "volcano", "sport", "politics", "science", "world", "news")

OBSERVER = "contains(title[1], 'volcano') or category = 'iceland'"
SIMPLE_MUTATOR = "<item>{ $i/@*, $i/node() }<category>bench</category></item>"


def generate(n: int, seed: int = 7) -> list[str]:
    """``n`` RSS items of about 600 bytes, like the ones the connectors store."""
    rng = random.Random(seed)
    items = []
    for k in range(n):
        title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))).capitalize()
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 40)))
        cats = "".join(
            f"<category>{c}</category>" for c in rng.sample(CATEGORIES, rng.randint(1, 3))
        )
        items.append(
            f"<item><title>{title}</title><link>https://news.example.org/{k}</link>"
            f'<description>&lt;p&gt;{text} &lt;a href="https://example.org/{k}"&gt;more'
            f"&lt;/a&gt;&lt;/p&gt;</description>"
            f"<pubDate>Mon, 01 Jan 2024 {k % 24:02d}:00:00 GMT</pubDate>"
            f'<guid isPermaLink="false">bench-{k}</guid>{cats}'
            f'<dc:creator xmlns:dc="http://purl.org/dc/elements/1.1/">Reporter {k % 50}'
            f"</dc:creator></item>"
        )
    return items


def batches(items: Sequence[str], size: int) -> list[Sequence[str]]:
    return [items[k : k + size] for k in range(0, len(items), size)]


def rate(fn: Callable[[], int]) -> float:
    """Items per second of ``fn`` (which returns how many items it handled)."""
    start = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - start)


def line(label: str, fast: float, slow: float, names: tuple[str, str]) -> Row:
    """A row: the first way and its items/s, the second and its, their ratio."""
    return {"measure": label, "first": names[0], "items/s": round(fast),
            "second": names[1], "its items/s": round(slow), "ratio": fast / slow}  # fmt: skip


def bench_observer(items: Sequence[str], size: int) -> list[Row]:
    assert uses_fast_path(OBSERVER, "boolean"), OBSERVER
    parts = batches(items, size)
    filter_batch(OBSERVER, (), parts[0][:100])  # compile outside the timing

    def run(fast: bool) -> int:
        kept = sum(sum(filter_batch(OBSERVER, (), part, fast=fast)) for part in parts)
        assert kept > 0
        return len(items)

    fast = rate(lambda: run(True))
    slow = rate(lambda: run(False))
    return [line("filter (XPath)", fast, slow, ("lxml", "elementpath"))]


def bench_mutator(
    label: str, query: XQuery, items: Sequence[str], size: int, sample: int, processes: int
) -> list[Row]:
    parts = batches(items, size)
    mutate_batch(query, (), items[:10])  # compile and check outside the timing
    errors: list[Exception] = []

    def batched() -> int:
        for part in parts:
            out = mutate_batch(query, (), part, on_error=lambda x, e: errors.append(e))
            assert len(out) == len(part)
        return len(items)

    def one_by_one() -> int:
        for xml in items[:sample]:
            mutate_batch(query, (), [xml], on_error=lambda x, e: errors.append(e))
        return min(sample, len(items))

    fast = rate(batched)
    slow = rate(one_by_one)
    assert not errors, errors[:3]
    rows = [line(f"mutator {label}", fast, slow, ("batched", "one per item"))]
    if processes > 1:
        os.environ[xqpool.ENV] = str(processes)
        try:
            assert xqpool.wait_ready(), "the XQuery helper processes did not start"
            mutate_batch(query, (), parts[0])  # the helpers compile it outside the timing
            shared = rate(batched)
        finally:
            del os.environ[xqpool.ENV]
        assert not errors, errors[:3]
        rows.append(line(f"mutator {label}", shared, fast, (f"{processes} processes", "1 process")))
    return rows


def measure(items: Sequence[str], args: argparse.Namespace) -> list[Row]:
    rows = bench_observer(items, args.batch)
    simple = XQuery(SIMPLE_MUTATOR, "simple mutator", 1)
    runs = (args.batch, args.sample, args.processes)
    rows += bench_mutator("simple (adds an element)", simple, items, *runs)
    tag = REPO / "xquery" / "tag-topics.xq"
    tagger = XQuery(tag.read_text(), str(tag), 1)
    rows += bench_mutator("xquery/tag-topics.xq", tagger, items, *runs)
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 100,000; --quick 1,000)")
    add = parser.add_argument
    add("--batch", type=int, help="items per batch call (default 10,000; --quick 250)")
    add("--sample", type=int, help="items for one-per-item (default 2,000; --quick 100)")
    parser.add_argument("--processes", type=int, default=2, help="for the shared batches")
    args = parser.parse_args()
    fill_defaults(args, {"items": (1_000, 100_000), "batch": (250, 10_000), "sample": (100, 2_000)})
    items = generate(args.items)
    size = sum(map(len, items)) / len(items)
    try:
        runs = repeated(args, lambda: measure(items, args))
    finally:
        xqpool.stop()
    report(
        args,
        "The XML item functions outside Spark",
        runs,
        notes=[f"{len(items):,} generated items, {size:.0f} bytes each on average, batches of "
               f"{args.batch:,}; one thread (but the helper processes); observer: {OBSERVER}; "
               "mutators: XQuery, Saxon-HE."],
    )  # fmt: skip


if __name__ == "__main__":
    main()
