"""Rows dropped behind the watermark, as Spark reports them per micro-batch, added up
per query: each batch once, across batches missed between two looks and across runs
of the same query (a restart goes on from its checkpoint with a new run id)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from roses_app.spark.progress import WatermarkDrops


@dataclass
class Operator:
    numRowsDroppedByWatermark: int


@dataclass
class Report:
    runId: str
    batchId: int
    stateOperators: list[Operator] = field(default_factory=list)


def report(run: str, batch: int, *dropped: int) -> Report:
    return Report(run, batch, [Operator(n) for n in dropped])


def test_each_batch_is_counted_once_across_looks_gaps_and_runs() -> None:
    drops = WatermarkDrops()
    history: list[Report] = []

    def look(last: Report | None) -> int:
        if last is not None:
            history.append(last)
        return drops.update("g1", last, lambda: list(history))

    assert look(None) == 0 and drops.dropped == {"g1": 0}
    assert look(report("r1", 0, 2, 1)) == 3  # two stateful operators
    assert look(history[-1]) == 3  # the same batch seen again: not counted twice
    history += [report("r1", 1, 4), report("r1", 2, 0)]  # two batches between looks
    assert look(report("r1", 3, 5)) == 12
    # a restart: a new run, its batch ids going on from the checkpoint
    assert look(report("r2", 4, 1)) == 13
    history += [report("r2", 5, 10)]
    assert look(report("r2", 6, 0)) == 23
    assert drops.update("other", None, list) == 0
    assert drops.dropped == {"g1": 23, "other": 0}


def test_a_stateless_query_s_recent_reports_are_never_read() -> None:
    """Its reports have no state operator: batches gone by between two looks are
    not read back (a py4j call and 100 reports' JSON about every second)."""
    drops = WatermarkDrops()

    def unread() -> list[Report]:
        raise AssertionError("a stateless query's recent reports were read")

    assert drops.update("stateless", report("r1", 0), unread) == 0
    assert drops.update("stateless", report("r1", 5), unread) == 0
    assert drops.counted == {"stateless": ("r1", 5)}


def _write(folder: Path, name: str, rows: list[dict[str, Any]]) -> None:
    temporary = folder.parent / f".{name}"
    temporary.write_text("".join(json.dumps(r) + "\n" for r in rows))
    temporary.rename(folder / name)  # whole, as the file source wants


@pytest.mark.spark
def test_real_late_rows_through_spark(tmp_path: Path, spark: Any) -> None:
    """A windowed count with a 10 s watermark: rows 100 s behind the newest are
    dropped by Spark, and counted from its real progress reports."""
    from pyspark.sql import functions as F

    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    drops = WatermarkDrops()

    def run(files: list[list[dict[str, Any]]], start: int) -> int:
        for n, rows in enumerate(files, start):
            _write(source, f"{n:03}.json", rows)
        frame = (
            spark.readStream.schema("t LONG, v STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .withColumn("time", F.timestamp_seconds("t"))
            .withWatermark("time", "10 seconds")
            .groupBy(F.window("time", "5 seconds"))
            .count()
        )
        query = (
            frame.writeStream.format("noop")
            .outputMode("append")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return drops.update("g1", query.lastProgress, lambda: query.recentProgress)

    base = int(time.time())
    assert run([[{"t": base + 100, "v": "new"}]], 0) == 0
    # the next run, from the checkpoint: two files, one batch each, a late row in each
    # (only the last report is looked at first: the other batch comes from the recent)
    late = [{"t": base + 5, "v": "late"}, {"t": base + 101, "v": "on time"}]
    assert run([late, [{"t": base + 1, "v": "late"}]], 1) == 2
    assert drops.dropped == {"g1": 2}


TWO = """
settings: {data_dir: ./data}
sources:
  a: {feed: "file:a.xml"}
streams:
  plain: {filter: {from: a, where: "true()"}}
  hourly:
    aggregate: {from: {window: {from: a, time: 1h, every: 1h}}, reduce: "<item/>"}
  daily:
    aggregate: {from: {window: {from: a, time: 1d, every: 1d}}, reduce: "<item/>"}
"""


@dataclass
class Query:
    """The parts of a StreamingQuery the daemon reads."""

    recentProgress: list[Report]
    isActive: bool = True
    status: dict[str, object] = field(default_factory=dict)

    @property
    def lastProgress(self) -> Report | None:
        return self.recentProgress[-1] if self.recentProgress else None


def test_healthz_and_metrics_tell_the_rows_each_query_dropped(tmp_path: Path) -> None:
    from roses_app.config import parse_config
    from roses_app.daemon import Daemon
    from roses_app.spark.queries import RunningQuery

    daemon = Daemon(parse_config(TWO, tmp_path / "feeds.yaml"))
    try:
        windows = Query([report("r", 0, 1), report("r", 1, 0, 2)])
        daemon.queries = [
            RunningQuery("stateless", frozenset({"plain"}), Query([]), lambda: None),  # type: ignore[arg-type]
            RunningQuery("gen-1", frozenset({"hourly", "daily"}), windows, lambda: None),  # type: ignore[arg-type]
        ]
        daemon._look_at_queries()  # (the daemon's loop does both each second)
        daemon._count_late()
        queries = daemon.health()["queries"]
        assert queries["gen-1"]["rows_dropped_by_watermark"] == 3
        assert queries["gen-1"]["streams"] == 2
        assert queries["stateless"]["rows_dropped_by_watermark"] == 0
        windows.recentProgress.append(report("r", 2, 4))
        daemon._count_late()
        text = daemon.metrics.exposition()[0].decode()
        assert 'roses_items_late_total{query="gen-1"} 7.0' in text
        assert daemon.health()["queries"]["gen-1"]["rows_dropped_by_watermark"] == 7
    finally:
        daemon.close()
