#!/usr/bin/env python3
"""Benchmark: N streams reading one windowed aggregate, against N aggregates of their own.

Generates ITEMS items over two sources (10 per tick), then runs in one process, side by
side, two configurations of N streams each (default 20):

  shared    one aggregate over a tumbling window of both sources (`digest`), and N
            streams filtering or mapping its results: the aggregate is a head,
            computed once, and the N stateless tails run in one fused pass over it
  separate  N aggregates whose reducers differ (so nothing can be shared), each
            under its own filter: what every stream reading a stateful node cost
            before heads were shared (one aggregation, one state store, per stream)

through the Spark engine (what `roses replay --engine spark` runs), after a warm-up, and
prints the wall time, the stateful operators of the generation query (Spark's
`stateOperators`) and the ratio.  The shared run's outputs are checked against the
reference engine.  Figures depend on the machine (2 cores here).

    .venv/bin/python benchmarks/bench_shared.py [--items 50000] [--streams 20]

Backs: docs/benchmarks.md, 'The commands' (shared heads: N streams reading one
aggregate, against N aggregates); no page quotes its figures.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench_replay import generate
from benchlib import Row, bench_parser, fill_defaults, repeated, report, work_folder

HEAD = """
settings: {{data_dir: {data}, spark: {{master: "local[2]", shuffle_partitions: 2}}}}
sources:
  wire: {{feed: "file:wire.xml"}}
  blog: {{feed: "file:blog.xml"}}
streams:
"""
WINDOW = "{window: {from: {union: [wire, blog]}, time: 100us, every: 100us}}"
REDUCE = "<item><title>{{ string-join(($items/category)[position() le {k}], ' ') }}</title></item>"
WORDS = ["world", "sport", "science", "politics", "business"]


def shared_config(n: int) -> str:
    text = f'  digest:\n    aggregate: {{from: {WINDOW}, reduce: "{REDUCE.format(k=3)}"}}\n'
    for k in range(1, n):
        if k % 2:
            where = f"contains(title, '{WORDS[k % 5]}')"
            text += f'  s{k}: {{filter: {{from: digest, where: "{where}"}}}}\n'
        else:
            text += f'  s{k}: {{map: {{from: digest, xpath: "title"}}}}\n'
    return text


def separate_config(n: int) -> str:
    text = ""
    for k in range(n):
        reduce = REDUCE.format(k=3 + k)  # a reducer of its own: no plan is shared
        where = f"contains(title, '{WORDS[k % 5]}')"
        text += (
            f"  s{k}:\n    filter:\n"
            f'      from: {{aggregate: {{from: {WINDOW}, reduce: "{reduce}"}}}}\n'
            f'      where: "{where}"\n'
        )
    return text


def run(spark: Any, config: Any, events: Any, work: Path) -> tuple[float, int, Any]:
    """Seconds, stateful operators of the generation query, outputs."""
    from roses_app.items import Event
    from roses_app.replay import MemorySink
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries
    from roses_app.spoolfiles import write_events

    log_dir = work / "spool" / "log"
    half = len(events.events) // 2 or 1
    for n, start in enumerate(range(0, len(events.events), half)):
        chunk = events.events[start : start + half]
        write_events(log_dir / f"e{n}.jsonl", [Event(e.source, e.ts, e.seq, e.item) for e in chunk])
    sink = MemorySink(list(config.streams))
    started = time.perf_counter()
    engine = Engine(spark, config.settings.namespaces, log_dir, work, sink, once=True)
    running = start_queries(engine, [s.stream for s in config.streams.values()])
    await_all(running)
    seconds = time.perf_counter() - started
    stateful = [r for r in running if r.name != "stateless"]
    operators = sum(len(r.query.lastProgress["stateOperators"]) for r in stateful)
    outputs = {name: sorted(sink.collected[name].get("", [])) for name in config.streams}
    return seconds, operators, outputs


def measure(work: Path, items: int, streams: int) -> list[Row]:
    """Both configurations over the same events, in `work`: a row each."""
    from roses_app.config import load_config
    from roses_app.replay import read_events, run_reference
    from roses_app.spark.session import build_session

    events = read_events(work.parent / "events.jsonl")
    rows: list[Row] = []
    for name, body in (("shared", shared_config(streams)), ("separate", separate_config(streams))):
        folder = work / name
        folder.mkdir(parents=True)
        (folder / "feeds.yaml").write_text(HEAD.format(data=folder / "data") + body)
        config = load_config(folder / "feeds.yaml")
        spark = build_session(config.settings.spark, work.parent / "cache")
        warm = read_events(work.parent / "events.jsonl")
        warm.events[:] = warm.events[:500]
        run(spark, config, warm, folder / "warm")  # Python workers, JIT
        seconds, operators, outputs = run(spark, config, events, folder / "run")
        row: Row = {"configuration": name, "streams": streams, "items": items, "s": seconds,
                    "stateful operators": operators}  # fmt: skip
        if name == "shared":
            reference = run_reference(config, events)
            row["same as the reference"] = all(
                outputs[s] == reference[s].get("", []) for s in outputs
            )
        rows.append(row)
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 50,000; --quick 1,000)")
    parser.add_argument("--streams", type=int, help="streams (default 20; --quick 3)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    fill_defaults(args, {"items": (1_000, 50_000), "streams": (3, 20)})
    with work_folder("roses-bench-shared-", args.keep) as work:
        generate(work / "events.jsonl", args.items)
        count = iter(range(args.repeat))
        runs = repeated(args, lambda: measure(work / f"run{next(count)}", args.items, args.streams))
    ratios = [run[1]["s"] / run[0]["s"] for run in runs]
    report(
        args,
        f"{args.streams} streams reading one windowed aggregate vs {args.streams} aggregates",
        runs,
        notes=[f"separate / shared: {statistics.median(ratios):.2f}x the time"],
    )


if __name__ == "__main__":
    main()
