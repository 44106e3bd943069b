#!/usr/bin/env python3
"""Benchmark: would evaluating filters and splits in the JVM beat the fused stage?

The question two earlier notes left open (issue 9): compute the stateless stage's
observers and split functions as Catalyst expressions over Spark's own parse of each
item (``from_xml``), with no Python worker, instead of the fused Python stage (lxml,
the presearcher).  On the same spool and in one run it times, as batch jobs:

* ``fused``: the fused stage as ROSES runs it (``spark.fused.fused_frame``);
* ``pass-through``: the same ``mapInArrow`` over the spool's lines with a function that
  decodes each line (as the stage does) and parses no item, and hands every event back
  as an output row (the stage's schema): what Spark's reading of the spool, the Arrow
  transfers to and from the Python workers and the collection cost by themselves,
  the floor of any stage run in Python workers;
* ``jvm parse``: Spark's parse of the two fields alone (a lower bound of any JVM path);
* ``jvm``: parse, filter and split as Catalyst expressions, the rows collected;
* ``jvm exact``: the same with the checks Spark's values need to equal lxml's, as
  cheap as I could write them: substring searches for comments, CDATA, PIs, DOCTYPE
  and namespace declarations; no '<' in a field's values (a child element comes back
  as markup); as many ``<title`` as ``lower(item)`` has (Spark matches names
  case-insensitively); at most one title (else XPath raises).  Without them the
  JVM's answers differ from the reference's on such items.

Its filter and split are approximations for timing (``trim``, not ``str.strip()``);
the exact rules are the presearcher's (``xmlfn/presearch_terms.py``).

    .venv/bin/python benchmarks/bench_native.py [--items 100000] [--repeat 3]

Backs: docs/benchmarks.md, 'The commands' (filters and splits as Catalyst expressions
vs the fused stage); no page quotes its figures.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from bench_replay import CONFIGS, HEAD, generate
from benchlib import Row, bench_parser, fill_defaults, report

SCHEMA = "`title` ARRAY<STRING>, `category` ARRAY<STRING>, `guid` ARRAY<STRING>"


def jvm_frame(events: object, *, exact: bool, collect: bool = True) -> object:
    """The bench's filter (volcano in the lower-cased title) and split (first category)
    over Spark's parse, as the fused stage's (outputs, part, item, guid) rows."""
    from pyspark.sql import functions as F

    item = F.col("item")
    x = F.from_xml(item, SCHEMA, {"ignoreSurroundingSpaces": "false"})
    frame = events.select("source", "ts", "seq", "item", x.alias("x"))  # type: ignore[attr-defined]
    if not collect:
        return frame.where("x is not null")
    if exact:
        # substring searches, not one regex: the regex checks cost more than the parse
        regular = F.lit(True)
        for marker in ("<!--", "<?", "<![CDATA[", "<!DOCTYPE", "<!ENTITY", "xmlns="):
            regular = regular & (F.instr(item, marker) == 0)
        for name in ("title", "category", "guid"):
            # a child element inside a field comes back as its markup ('<' in a value;
            # an escaped '&lt;' too, which only sends such items to Python)
            values = F.coalesce(F.col(f"x.{name}"), F.array())
            regular = regular & ~F.exists(values, lambda v: F.instr(v, "<") > 0)
            # Spark matches names case-insensitively: a <Title> would be read as a title
            spelled = F.size(F.split(item, f"<{name}[\\s/>]"))
            regular = regular & (F.size(F.split(F.lower(item), f"<{name}[\\s/>]")) == spelled)
        regular = regular & (F.size(F.coalesce(F.col("x.title"), F.array())) <= 1)
        frame = frame.where(regular)
    title = F.lower(F.get(F.col("x.title"), 0))
    volcano = (F.col("source") == "wire") & title.contains("volcano")
    part = F.trim(F.get(F.col("x.category"), 0))
    entries = F.array(
        F.struct(F.when(volcano, F.array(F.lit(0))).alias("o"), F.lit("").alias("p")),
        F.struct(F.array(F.lit(1)).alias("o"), F.when(part != "", part).alias("p")),
    )
    guid = F.coalesce(F.get(F.col("x.guid"), 0), F.sha2(item, 256))
    rows = frame.select(F.explode(entries).alias("e"), "ts", "seq", "item", guid.alias("guid"))
    return rows.where(F.col("e.o").isNotNull() & F.col("e.p").isNotNull())


def pass_through(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every event of the spool's lines as an output row of the fused stage's schema,
    no item parsed."""
    from roses_app.spark.fused import FUSED_SCHEMA, bad_line_hook
    from roses_app.spoolfiles import decode_lines

    for batch in batches:
        lines = batch.column(0).cast(pa.binary()).to_pylist()
        _, ts, seq, items, _ = decode_lines(lines, bad_line_hook(None))
        n = len(ts)
        columns = {
            "outputs": pa.array([[0]] * n, pa.list_(pa.int32())),
            "part": pa.array([""] * n, pa.string()),
            "ts": pa.array(ts, pa.int64()),
            "seq": pa.array(seq, pa.int64()),
            "item": pa.array(items, pa.string()),
            "guid": pa.nulls(n, pa.string()),
            "arrival": pa.array(ts, pa.int64()),
        }
        yield pa.RecordBatch.from_arrays(list(columns.values()), schema=FUSED_SCHEMA)


def timed(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeat):
        started = time.perf_counter()
        rows = run()
        best = min(best, time.perf_counter() - started)
    return best, rows


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    add = parser.add_argument
    add("--items", type=int, help="items (default 100,000; --quick 2,000)")
    add("--repeat", type=int, help="timings of each, the best kept (default 3; --quick 1)")
    args = parser.parse_args()
    fill_defaults(args, {"items": (2_000, 100_000), "repeat": (1, 3)})

    from roses_app.algebra.planner.program import build_program
    from roses_app.algebra.planner.rewrite import rewrite_streams
    from roses_app.config import load_config
    from roses_app.items import Event
    from roses_app.replay import read_events
    from roses_app.spark.fused import FUSED_DDL, fused_frame
    from roses_app.spark.session import build_session
    from roses_app.spool import SPARK_SCHEMA_DDL
    from roses_app.spoolfiles import write_events

    work = Path(tempfile.mkdtemp(prefix="roses-bench-native-"))
    generate(work / "events.jsonl", args.items)
    config_text = (HEAD + CONFIGS["filter+split"]).format(data=work / "data", xquery="")
    (work / "feeds.yaml").write_text(config_text)
    config = load_config(work / "feeds.yaml")
    spark = build_session(config.settings.spark, work / "cache")
    events = read_events(work / "events.jsonl").events
    half = len(events) // 2 or 1
    for n in range(0, len(events), half):  # a file per core, as replay writes them
        chunk = [Event(e.source, e.ts, e.seq, e.item, e.published) for e in events[n : n + half]]
        write_events(work / "spool" / f"e{n}.jsonl", chunk)
    streams = rewrite_streams([s.stream for s in config.streams.values()], ())
    program = build_program([(s.plan, s.name) for s in streams], ())
    lines = spark.read.text(str(work / "spool"))  # what the stage reads
    spool = spark.read.schema(SPARK_SCHEMA_DDL).json(str(work / "spool"))  # the JVM's input

    runs: dict[str, Callable[[], int]] = {
        "fused": lambda: fused_frame(lines, program).toArrow().num_rows,
        "pass-through": lambda: lines.mapInArrow(pass_through, FUSED_DDL).toArrow().num_rows,
        "jvm parse": lambda: jvm_frame(spool, exact=False, collect=False).count(),  # type: ignore[attr-defined]
        "jvm": lambda: jvm_frame(spool, exact=False).toArrow().num_rows,  # type: ignore[attr-defined]
        "jvm exact": lambda: jvm_frame(spool, exact=True).toArrow().num_rows,  # type: ignore[attr-defined]
    }
    for run in runs.values():  # warm-up: JIT, Python workers
        run()
    base = None
    table: list[Row] = []
    for name, run in runs.items():
        seconds, rows = timed(run, args.repeat)
        base = base or seconds
        table.append({"way": name, "s": seconds, "items/s": round(args.items / seconds),
                      "rows": rows, "vs the fused stage": base / seconds})  # fmt: skip
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    title = f"Filters and splits in the JVM vs the fused stage: {args.items:,} items"
    report(args, title, [table], notes=[f"Filter + split, best of {args.repeat}."])


if __name__ == "__main__":
    main()
