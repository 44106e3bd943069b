#!/usr/bin/env python3
"""Benchmark: the presearcher (``roses_app.xmlfn.presearch``) with many observers.

Prints, in one run, for N = 10, 1,000 and 10,000 observers (``--observers``) over
the same generated items (default 10,000):

* the time to build the presearcher;
* ``match()``: items/s, µs per item, and the average numbers of observers accepted
  without evaluation and of candidates left to evaluate per item;
* the real per-item cost of those candidates: each evaluated with
  ``roses_app.xmlfn.batch.observer_fn`` (the function the fused engine calls);
* for scale, the cost per item of evaluating every observer without a presearcher,
  timed on a few items (``--sample``).

Items: an 8-word title, a 30-word description, 0-3 categories (of 12), a link, a guid
and a date; words from a 2,000-word vocabulary with a Zipf-like distribution (weight
1/rank).  Observers, in equal parts::

    contains(lower-case(string(.)), 'w')
    contains(lower-case(title), 'w1') and not(contains(lower-case(.), 'w2'))
    contains(lower-case(string(.)), 'w1') and contains(lower-case(string(.)), 'w2')
    (contains(lower-case(.), 'w1') or contains(lower-case(.), 'w2')) and category = ('c')

with words drawn with the same Zipf-like weights, but past the ``--skip`` (default
100) most frequent words: nobody watches for stop words (with ``--skip 0`` an item
matches one observer in seven).  All these observers are exact where the item has
at most one title: no candidates are left unless ``--two-titles`` (a share of items
with a second title) or ``--open`` (a share of observers replaced by
``contains(lower-case(.), 'w1') and matches(., 'w2')``, not exact) say otherwise.

Times are the CPU time of this process (``time.process_time``), after a warm-up pass
over 200 items: on a busy machine wall-clock time mostly measures the others.  One
thread; the figures of one run are comparable with each other, not with another run's.

    .venv/bin/python benchmarks/bench_presearch.py [--items 10000] [--observers 10,1000,10000]

Backs: docs/benchmarks.md, 'The commands' (the presearcher alone: items/s and
candidates per item); no page quotes its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import string
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchlib import Row, bench_parser, fill_defaults, repeated, report  # noqa: E402
from lxml import etree  # noqa: E402

from roses_app.xmlfn.batch import observer_fn  # noqa: E402
from roses_app.xmlfn.presearch import Presearcher  # noqa: E402
from roses_app.xmlfn.xpath import parse  # noqa: E402

CATEGORIES = (
    *("space", "sport", "politics", "science", "world", "business"),
    *("health", "tech", "culture", "climate", "europe", "asia"),
)


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """``size`` distinct made-up words, 2 to 10 letters, short ones more frequent."""
    words: dict[str, None] = {}
    while len(words) < size:
        length = min(10, max(2, int(rng.gauss(6, 2))))
        words[("".join(rng.choice(string.ascii_lowercase) for _ in range(length)))] = None
    return list(words)


class Zipf:
    """Words drawn with weight 1/rank, past the ``skip`` first ranks."""

    def __init__(self, words: list[str], rng: random.Random, skip: int = 0) -> None:
        self.words = words[skip:]
        self.cum = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(self.words))))
        self.rng = rng

    def draw(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)


def items(n: int, words: Zipf, rng: random.Random, two_titles: float = 0.0) -> list[str]:
    out = []
    for k in range(n):
        title = " ".join(words.draw(8)).capitalize()
        if rng.random() < two_titles:
            title += "</title><title>" + " ".join(words.draw(8)).capitalize()
        description = " ".join(words.draw(30)).capitalize() + "."
        cats = "".join(
            f"<category>{c}</category>" for c in rng.sample(CATEGORIES, rng.randint(0, 3))
        )
        out.append(
            f"<item><title>{title}</title><link>https://news.example.org/{k}</link>"
            f"<description>{description}</description>{cats}"
            f"<guid>https://news.example.org/{k}</guid>"
            f"<pubDate>Mon, 06 Jan 2025 10:{k % 60:02d}:00 GMT</pubDate></item>"
        )
    return out


def observers(n: int, words: Zipf, rng: random.Random, open_: float = 0.0) -> dict[int, str]:
    out: dict[int, str] = {}
    for key in range(n):
        w1, w2 = words.draw(2)
        while w2 == w1:
            [w2] = words.draw(1)
        shape = key % 4
        if rng.random() < open_:
            expr = f"contains(lower-case(.), '{w1}') and matches(., '{w2}')"
        elif shape == 0:
            expr = f"contains(lower-case(string(.)), '{w1}')"
        elif shape == 1:
            expr = f"contains(lower-case(title), '{w1}') and not(contains(lower-case(.), '{w2}'))"
        elif shape == 2:
            expr = (
                f"contains(lower-case(string(.)), '{w1}') "
                f"and contains(lower-case(string(.)), '{w2}')"
            )
        else:
            expr = (
                f"(contains(lower-case(.), '{w1}') or contains(lower-case(.), '{w2}')) "
                f"and category = ('{rng.choice(CATEGORIES)}')"
            )
        out[key] = expr
    return out


def bench(
    n: int, exprs: dict[int, str], trees: list[etree._Element], sample: int
) -> dict[str, float]:
    clock = time.process_time
    start = clock()
    searcher = Presearcher(exprs)
    built = clock() - start
    match = searcher.match
    for tree in trees[:200]:
        match(tree)
    start = clock()
    results = [match(tree) for tree in trees]
    matched = clock() - start
    accepted = sum(len(a) for a, _ in results)
    candidates = sum(len(c) for _, c in results)
    functions = {key: observer_fn(expr, ()) for key, expr in exprs.items()}
    start = clock()
    for tree, (_, open_) in zip(trees, results, strict=True):
        for key in open_:
            # a failing item counts as not matching: a cost like any other
            with contextlib.suppress(Exception):
                functions[key](tree)
    evaluated = clock() - start
    start = clock()
    for tree in trees[:sample]:
        for fn in functions.values():
            with contextlib.suppress(Exception):
                fn(tree)
    everything = (clock() - start) / max(1, min(sample, len(trees)))
    count = len(trees)
    return {
        "n": n,
        "build_s": built,
        "items_s": count / matched,
        "match_us": matched / count * 1e6,
        "accepted": accepted / count,
        "candidates": candidates / count,
        "eval_us": evaluated / count * 1e6,
        "all_us": everything * 1e6,
    }


def measure(args: argparse.Namespace) -> list[Row]:
    """The items and observers generated from --seed, then a row per observer count."""
    rng = random.Random(args.seed)
    vocab = vocabulary(2000, rng)
    xmls = items(args.items, Zipf(vocab, rng), rng, args.two_titles)
    trees = [parse(xml) for xml in xmls]
    rows: list[Row] = []
    for n in (int(x) for x in args.observers.split(",")):
        words = Zipf(vocab, random.Random(args.seed + n), args.skip)
        exprs = observers(n, words, rng, args.open)
        r = bench(n, exprs, trees, args.sample)
        rows.append({
            "observers": n,
            "build s": r["build_s"],
            "match/s": round(r["items_s"]),
            "µs/item": r["match_us"],
            "accepted": r["accepted"],
            "candidates": r["candidates"],
            "eval µs": r["eval_us"],
            "total µs": r["match_us"] + r["eval_us"],
            "no presearch µs": r["all_us"] if args.sample else None,
        })  # fmt: skip
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 10,000; --quick 300)")
    parser.add_argument("--observers", help="counts (default 10,1000,10000; --quick 10,100)")
    parser.add_argument("--skip", type=int, default=100, help="ranks observers never use")
    parser.add_argument("--sample", type=int, default=3, help="items to evaluate all on")
    parser.add_argument("--two-titles", type=float, default=0.0, help="share of items")
    parser.add_argument("--open", type=float, default=0.0, help="share of observers")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    fill_defaults(args, {"items": (300, 10_000), "observers": ("10,100", "10,1000,10000")})
    report(
        args,
        f"The presearcher: {args.items:,} items ({args.two_titles:.0%} with two titles), "
        f"observers past the {args.skip} most frequent words ({args.open:.0%} not exact)",
        repeated(args, lambda: measure(args)),
        notes=["CPU time of this process; µs per item."],
    )


if __name__ == "__main__":
    main()
