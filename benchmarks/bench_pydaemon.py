#!/usr/bin/env python3
"""Benchmark: Spark's Python daemon as ROSES runs it (roses_app.spark.pydaemon: pyspark
from the installed package's compiled code) against Spark's own (``pyspark.daemon``:
pyspark from ``$SPARK_HOME/python/lib/pyspark.zip``, compiled again by every daemon
and worker), side by side in one run.

Cold runs (see benchmarks/coldruns.py): `roses replay --engine spark` of 10 events (the
start) and of --items items, net of the start; with --once, `roses once` over the
shipped feeds.yaml.  Spark's daemon is given by ``settings.spark.conf`` in a copy of
each config.  The daemon's cost is paid once per run, so the start and `roses once`
show it; the net time should not move.

Figures depend on the machine (2 cores here): run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_pydaemon.py [--items 20000] [--subs 1] [--repeat 3] [--once]

Backs: docs/benchmarks.md, 'The commands' (Spark's Python daemon vs ROSES's); no page
quotes its figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchlib import bench_parser, report, with_spark_setting, work_folder
from coldruns import add_cold_arguments, as_is, cold, cold_title, fill_cold_defaults

SPARKS = "pyspark.daemon (zip)"
OURS = "roses_app.spark.pydaemon"


def sparks_daemon(config: Path) -> Path:
    """``config`` with Spark's own Python daemon."""
    entry = 'conf: {"spark.python.daemon.module": "pyspark.daemon"}'
    return with_spark_setting(config, entry, f"{config.stem}-spark-daemon.yaml")


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    add_cold_arguments(parser, items=20_000)
    args = parser.parse_args()
    fill_cold_defaults(args)
    with work_folder("roses-pydaemon-", keep=False) as work:
        print(f"working in {work}; {args.items:,} items, "
              f"{args.subs} subscription(s) and a split", file=sys.stderr)  # fmt: skip
        variants = {SPARKS: sparks_daemon, OURS: as_is}
        rows, ratios = cold(work / "cold", args, variants, "Python daemon")
    report(args, cold_title(args.repeat), [rows], notes=[ratios])


if __name__ == "__main__":
    main()
