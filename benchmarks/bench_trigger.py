#!/usr/bin/env python3
"""Benchmark: what Spark's trigger costs the JVM while spool files keep arriving.

A daemon polling many feeds appends a spool file every fraction of a second.  This
starts ROSES's own Spark session (spark/session.py: the daemon's settings, tiered JIT)
and its spool stream (spark/runner.events_stream: Spark's file source, committed files
archived), with a foreachBatch that collects each micro-batch to the driver, and for
each --triggers value writes --files files of --lines spool lines, evenly over
--seconds, then reports the JVM's CPU (proctree.cpu_seconds of its process) from the
first file to the last line collected: batches, CPU, CPU per batch, and CPU against
the first trigger's.  A warm-up pass at the first trigger runs before, unreported: the JIT
compiles during the first passes.  Figures depend on the machine: run twice.

    .venv/bin/python benchmarks/bench_trigger.py [--triggers 0.5,1,2,5] [--seconds 20]
        [--files 300] [--lines 20] [--master local[2]] [--quick]

Backs: docs/operating.md, the trigger's default (`500ms`) and docs/benchmarks.md,
'Polling many feeds' (Spark's trigger while spool files keep arriving).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
from benchlib import Row, bench_parser, fill_defaults, repeated, report
from proctree import cpu_seconds
from pyspark.sql import DataFrame, SparkSession

from roses_app.config.model import SparkSettings
from roses_app.spark.runner import events_stream
from roses_app.spark.session import build_session

ITEM = "<item><title>t</title><description>" + "d" * 1500 + "</description></item>"


def spool_lines(start: int, count: int) -> bytes:
    return b"".join(
        orjson.dumps(
            {"source": "f", "ts": 1, "seq": start + k, "item": ITEM, "published": None},
            option=orjson.OPT_APPEND_NEWLINE,
        )
        for k in range(count)
    )


def one_pass(
    spark: SparkSession, root: Path, trigger: float, args: argparse.Namespace
) -> tuple[int, float]:
    """Batches and JVM CPU seconds of one pass at ``trigger`` seconds."""
    log = root / "log"
    log.mkdir(parents=True)
    seen, batches = [0], [0]

    def handle(batch: DataFrame, _batch_id: int) -> None:
        seen[0] += len(batch.collect())
        batches[0] += 1

    query = (
        events_stream(spark, log)
        .writeStream.option("checkpointLocation", str(root / "checkpoint"))
        .foreachBatch(handle)
        .trigger(processingTime=f"{trigger} seconds")
        .start()
    )
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a local session: the JVM is this process's child
    pid = int(jvm.ProcessHandle.current().pid())
    time.sleep(2.0)  # the query's first (empty) batches
    before = cpu_seconds(pid)
    for n in range(args.files):
        tmp = root / f".{n:020d}.jsonl"
        tmp.write_bytes(spool_lines(n * args.lines + 1, args.lines))
        os.rename(tmp, log / f"{n * args.lines + 1:020d}-bench.jsonl")  # whole, as the spool does
        time.sleep(args.seconds / args.files)
    while seen[0] < args.files * args.lines:
        time.sleep(0.05)
    used = cpu_seconds(pid) - before
    query.stop()
    return batches[0], used


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, quick="a short run (a test of the benchmark)")
    add = parser.add_argument
    add("--triggers", help="trigger intervals in seconds, comma-separated (0.5,1,2,5; quick 0.5,2)")
    add("--seconds", type=float, help="seconds over which the files arrive (20; quick 3)")
    add("--files", type=int, help="spool files a pass (300; quick 30)")
    add("--lines", type=int, default=20, help="lines a file (20: one feed's first document)")
    add("--master", default="local[2]", help="Spark master (default local[2])")
    args = parser.parse_args(argv)
    fill_defaults(
        args, {"triggers": ("0.5,2", "0.5,1,2,5"), "seconds": (3.0, 20.0), "files": (30, 300)}
    )
    args.trigger_list = [float(t) for t in args.triggers.split(",") if t.strip()]
    return args


def measure(args: argparse.Namespace) -> list[Row]:
    """A session, a warm-up pass, then a row per trigger."""
    work = Path(tempfile.mkdtemp(prefix="roses-trigger-"))
    try:
        spark = build_session(SparkSettings(master=args.master), work / "cache")
        one_pass(spark, work / "warm", args.trigger_list[0], args)
        found = [(t, *one_pass(spark, work / f"t{t:g}", t, args)) for t in args.trigger_list]
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    first = found[0][2] or 1.0
    return [
        {"trigger s": trigger, "batches": batches, "JVM CPU s": used,
         "per batch ms": round(used / max(1, batches) * 1000), "CPU vs the first": used / first}
        for trigger, batches, used in found
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report(
        args,
        "Spark's trigger: the JVM's CPU while spool files arrive",
        repeated(args, lambda: measure(args)),
        notes=[f"{args.files} files of {args.lines} lines over {args.seconds:g} s a pass."],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
