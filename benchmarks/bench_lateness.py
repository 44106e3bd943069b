#!/usr/bin/env python3
"""Benchmark: allowed lateness (seed 001), ROSES against Spark's Update mode, one run.

N items (default 100,000) arrive in order in polls of --group items (one ingest time
each, 30 s apart); 90% are published 1 µs-5 s before they arrive, 10% out of order,
1 to 5 minutes (lateness/2) before: late for windows already closed, within the
lateness (10 minutes).  For a tumbling (1m every 1m) and a sliding (5m every 1m)
window, both engines read the same spool files, one per poll, and reduce each window
to `categories` (sorted distinct categories: a late item seldom changes it) and
`count` (a late item always changes it):

* ROSES (what `roses replay` runs, two streams): a window is published when the clock
  passes its end, and again only if a late item changed its result; the windows
  computed again but unchanged are the re-emissions avoided (Scotty's figure).
* Spark's Update mode: withWatermark(10 minutes), groupBy(window) with collect_set and
  count, maxFilesPerTrigger 1 (a poll per micro-batch), availableNow, foreachBatch:
  every window a micro-batch touched is emitted again, changed or not.

Update mode also emits the windows still open at the end, which ROSES publishes only
once the clock passes them (no later item or heartbeat comes here).  items/s: the wall
time of one run of both reducers (ROSES: engine, queries, their end), the session
built and warmed on --warm-items items first (not counted).  The
ROSES result is then compared with its reference engine on the same items.  Figures
depend on the machine (2 cores here); run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_lateness.py [--items 100000] [--group 500]

Backs: docs/benchmarks.md, 'The commands' (re-emissions avoided against Spark's Update
mode); no page quotes its figures.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import Row, bench_parser, fill_defaults, report, work_folder

START = 1_793_491_200_000_000  # 2026-11-01T00:00:00Z in µs
SECOND = 1_000_000
POLL = 30 * SECOND
LATENESS = 600 * SECOND
CATEGORIES = ["world", "sport", "science", "politics", "business", "arts", "health", "tech"]
REDUCERS = {  # name: ROSES reducer (XQuery over $items)
    "categories": "<item><title>{ string-join(sort(distinct-values($items/category)), ' ') }"
    "</title></item>",
    "count": "<item><title>{ count($items) }</title></item>",
}
SHAPES = {  # name: ROSES window (time, every), Spark window (duration, slide)
    "tumbling": (("1m", "1m"), ("1 minute", "1 minute")),
    "sliding": (("5m", "1m"), ("5 minutes", "1 minute")),
}
CONFIG = """
settings: {{data_dir: {data}, spark: {{master: "{master}", shuffle_partitions: 2}}}}
sources:
  wire: {{feed: "file:wire.xml", time: published}}
streams:"""
STREAM = """
  {name}:
    aggregate:
      from: {{window: {{from: wire, time: {time}, every: {every}}}}}
      reduce: "{reduce}"
      lateness: 10m"""
REVISION = re.compile(r'revision="(\d+)"')


def generate(n: int, group: int, seed: int) -> list[Any]:
    """The events (RefInput) in arrival order: ``ts`` the ingest time of its poll."""
    from roses_app.algebra.reference.registry import RefInput

    rng = random.Random(seed)
    events = []
    for i in range(n):
        ts = START + (i // group) * POLL
        if rng.random() < 0.1:  # out of order, within the lateness
            published = ts - rng.randint(60 * SECOND, LATENESS // 2)
        else:
            published = ts - rng.randint(1, 5 * SECOND)
        category = rng.choice(CATEGORIES)
        item = f"<item><title>Item {i}</title><category>{category}</category><guid>g{i}"
        events.append(RefInput("wire", ts, i + 1, item + "</guid></item>", published))
    return events


def write_spool(log_dir: Path, events: list[Any]) -> None:
    """One spool file per arrival group, modified in arrival order."""
    from roses_app.items import Event
    from roses_app.spoolfiles import write_events

    groups: dict[int, list[Any]] = {}
    for e in events:
        groups.setdefault(e.ts, []).append(Event(e.source, e.ts, e.seq, e.item, e.published))
    for n, (ts, group) in enumerate(sorted(groups.items())):
        path = log_dir / f"events-{group[0].seq:012d}.jsonl"
        write_events(path, group)
        os.utime(path, (ts // SECOND, START // SECOND + n))  # Spark orders files by mtime


def make_config(folder: Path, shape: str, master: str) -> Any:
    from roses_app.config import load_config

    (time_, every), _ = SHAPES[shape]
    text = CONFIG.format(data=folder / "data", master=master)
    for reducer, xquery in REDUCERS.items():
        text += STREAM.format(name=reducer, time=time_, every=every, reduce=xquery)
    (folder / "feeds.yaml").write_text(text + "\n")
    return load_config(folder / "feeds.yaml")


@dataclass
class Roses:
    seconds: float
    outputs: dict[str, list[Any]]  # stream -> its events, sorted
    tallies: dict[str, dict[str, int]]  # kind -> stream -> count
    batches: dict[str, list[float]]  # query -> [micro-batches, seconds in them]


def run_roses(spark: Any, config: Any, events: list[Any], work: Path) -> Roses:
    """What ``roses_app.replay.run_spark`` does, with an error accumulator for the
    tallies and one spool file per arrival group."""
    from roses_app.algebra.time.lateness import split_tallies
    from roses_app.replay import MemorySink
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, error_counter, start_queries

    folder = Path(tempfile.mkdtemp(prefix="roses-", dir=work))
    log_dir = folder / "spool" / "log"
    write_spool(log_dir, events)
    batches: dict[str, list[float]] = {}

    def on_batch(qid: str, rows: int, seconds: float) -> None:
        done = batches.setdefault(qid, [0, 0.0])
        done[0], done[1] = done[0] + 1, done[1] + seconds

    sink = MemorySink(list(config.streams))
    errors = error_counter(spark)
    started = time.perf_counter()
    engine = Engine(
        spark,
        config.settings.namespaces,
        log_dir,
        folder,
        sink,
        once=True,
        lateness=config.settings.lateness,
        errors=errors,
        on_batch=on_batch,
    )
    await_all(start_queries(engine, [s.stream for s in config.streams.values()]))
    seconds = time.perf_counter() - started
    outputs = {name: sorted(sink.collected[name].get("", [])) for name in config.streams}
    return Roses(seconds, outputs, split_tallies(dict(errors.value))[1], batches)


@dataclass
class Update:
    seconds: float = 0.0
    batches: int = 0  # micro-batches, with data or not
    rows: int = 0
    windows: int = 0  # distinct windows emitted
    again: int = 0  # rows of a window emitted before
    after_end: int = 0  # of them, once the clock had passed the window's end
    unchanged: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REDUCERS, 0))
    unchanged_late: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REDUCERS, 0))
    dropped: int = 0  # rows dropped by the watermark


def run_update(spark: Any, shape: str, events: list[Any], work: Path) -> Update:
    """Spark's own answer: Update mode, one micro-batch per arrival group."""
    from pyspark.sql import functions as F

    from roses_app.spool import SPARK_SCHEMA_DDL

    folder = Path(tempfile.mkdtemp(prefix="update-", dir=work))
    write_spool(folder / "log", events)
    clock_before: dict[int, int] = {}  # ingest time -> the latest time seen before it
    clock = 0
    for e in events:
        clock_before.setdefault(e.ts, clock)
        clock = max(clock, e.published or e.ts)
    _, (duration, slide) = SHAPES[shape]
    reader = spark.readStream.schema(SPARK_SCHEMA_DDL).option("maxFilesPerTrigger", 1)
    frame = (
        reader.json(str(folder / "log"))
        .withColumn("time", F.timestamp_micros(F.coalesce("published", "ts")))
        .withColumn("category", F.regexp_extract("item", "<category>([^<]*)</category>", 1))
        .withWatermark("time", "10 minutes")
        .groupBy(F.window("time", duration, slide).alias("w"))
        .agg(
            F.sort_array(F.collect_set("category")).alias("categories"),
            F.count(F.lit(1)).alias("count"),
            F.max("ts").alias("arrival"),  # this batch's ingest time: it touched the window
        )
        .select(F.unix_micros(F.col("w.end")).alias("end"), "categories", "count", "arrival")
    )
    out = Update()
    last: dict[int, dict[str, object]] = {}  # window end -> its last values

    def handle(batch: Any, batch_id: int) -> None:
        out.batches += 1
        for end, categories, count, arrival in batch.collect():
            out.rows += 1
            value = {"categories": list(categories), "count": count}
            before = last.get(end)
            last[end] = value
            if before is None:
                continue
            late = end <= clock_before[arrival]
            out.again += 1
            out.after_end += late
            for name in REDUCERS:
                out.unchanged[name] += before[name] == value[name]
                out.unchanged_late[name] += late and before[name] == value[name]

    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    started = time.perf_counter()
    writer = frame.writeStream.outputMode("update").foreachBatch(handle)
    writer = writer.option("checkpointLocation", str(folder / "checkpoint"))
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    out.seconds = time.perf_counter() - started
    out.windows = len(last)
    for progress in query.recentProgress:
        out.dropped += sum(s.numRowsDroppedByWatermark for s in progress.stateOperators)
    return out


LABELS = [
    "rows emitted",
    "windows first published",
    "re-emissions (a window again)",
    "  of them unchanged",
    "  after the window's end",
    "    of them unchanged",
    "windows touched again by late items",
    "  unchanged, not re-emitted (avoided)",
    "late items dropped",
]


def shape_rows(shape: str, items: int, roses: Roses, update: Update) -> tuple[list[Row], list[str]]:
    """(a row per measure: ROSES and Update mode for each reducer; the notes)."""
    queries = ", ".join(
        f"{q.split('-')[0]} {n:.0f} in {s:.1f}s" for q, (n, s) in roses.batches.items()
    )
    notes = [
        f"{shape}: ROSES {roses.seconds:.1f}s, micro-batches per query: {queries}; "
        f"Update mode {update.seconds:.1f}s, {update.batches} micro-batches."
    ]
    cells: dict[str, list[tuple[int, int]]] = {}
    for name, events in roses.outputs.items():
        revised = sum(1 for e in events if REVISION.search(e.item))
        tally = roses.tallies["revised"].get(name, 0)
        if revised != tally:
            notes.append(f"!! {name}: {revised} revisions published, {tally} counted")
        unchanged = roses.tallies["unchanged"].get(name, 0)
        touched = revised + unchanged
        cells[name] = [
            (len(events), update.rows),
            (len(events) - revised, update.windows),
            (revised, update.again),
            (0, update.unchanged[name]),
            (revised, update.after_end),
            (0, update.unchanged_late[name]),
            (touched, update.after_end),
            (unchanged, 0),
            (roses.tallies["late"].get(name, 0), update.dropped),
        ]
        share = f"{unchanged / touched:.1%}" if touched else "-"
        fewer = f"{1 - revised / update.again:.1%}" if update.again else "-"
        notes.append(
            f"{shape}/{name}: ROSES avoided {unchanged} of {touched} re-emissions ({share}); "
            f"Update mode re-emitted {update.again} rows ({update.unchanged[name]} unchanged), "
            f"ROSES {revised}: {fewer} fewer"
        )
    columns = [f"{name} {engine}" for name in REDUCERS for engine in ("ROSES", "Update")]
    rate = [round(items / roses.seconds), round(items / update.seconds)]
    rows: list[Row] = [
        {"window": shape, "measure": "items/s (one run of both reducers)",
         **dict(zip(columns, rate * len(REDUCERS), strict=True))}
    ]  # fmt: skip
    for n, label in enumerate(LABELS):
        values = [c for name in REDUCERS for c in cells[name][n]]
        rows.append({"window": shape, "measure": label.strip(),
                     **dict(zip(columns, values, strict=True))})  # fmt: skip
    return rows, notes


def measure(work: Path, args: argparse.Namespace, events: list[Any]) -> tuple[list[Row], list[str]]:
    from roses_app.replay import EventList, run_reference
    from roses_app.spark.session import build_session

    warm = [e for e in events if e.seq <= args.warm_items]
    rows: list[Row] = []
    notes: list[str] = []
    for shape, ((time_, every), _) in SHAPES.items():
        folder = work / shape
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        config = make_config(folder, shape, args.master)
        started = time.perf_counter()
        spark = build_session(config.settings.spark, work / "cache")
        run_roses(spark, config, warm, folder)  # JIT, Python workers
        run_update(spark, shape, warm, folder)
        ready = time.perf_counter() - started
        print(f"== {shape} (time {time_}, every {every}): Spark ready and warm on "
              f"{len(warm)} items in {ready:.1f}s (not counted)", file=sys.stderr)  # fmt: skip
        roses = run_roses(spark, config, events, folder)
        update = run_update(spark, shape, events, folder)
        its_rows, its_notes = shape_rows(shape, args.items, roses, update)
        reference = run_reference(config, EventList(events, iso_times=True))
        same = all(sorted(reference[n][""]) == roses.outputs[n] for n in REDUCERS)
        its_notes.append(f"{shape}: ROSES's Spark result identical to its reference engine: {same}")
        rows += its_rows
        notes += its_notes
    return rows, notes


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--items", type=int, help="items (default 100,000; --quick 1,000)")
    parser.add_argument("--group", type=int, default=500, help="items per arrival group")
    add = parser.add_argument
    add("--warm-items", type=int, help="items of the warm-up (default 10,000; --quick 200)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    fill_defaults(args, {"items": (1_000, 100_000), "warm_items": (200, 10_000)})
    events = generate(args.items, args.group, args.seed)
    late = sum(1 for e in events if e.ts - e.published >= 60 * SECOND)
    notes = [
        f"{args.items} items, {-(-args.items // args.group)} arrival groups of {args.group} "
        f"({POLL // SECOND}s apart, one spool file each), {late} out of order "
        f"(1-{LATENESS // 2 // 60 // SECOND} min), lateness {LATENESS // 60 // SECOND} min"
    ]
    runs: list[list[Row]] = []
    with work_folder("roses-bench-lateness-", keep=False) as work:
        for _ in range(args.repeat):
            rows, run_notes = measure(work, args, events)
            runs.append(rows)
    report(args, "Allowed lateness: ROSES vs Spark's Update mode", runs, [*notes, *run_notes])


if __name__ == "__main__":
    main()
