"""What Spark's progress reports tell: the rows each query dropped behind the
watermark (:class:`WatermarkDrops`, for the daemon's health, metrics and console), and
the progress of finite runs (`roses once`, `roses replay`) for a person at a terminal.

While the queries run, :func:`progress_line` sums what Spark reports (micro-batches
done and rows read per query, the tasks of the stages running now) into one line,
and :class:`TerminalProgress` rewrites it in place on a terminal.  Off a terminal
(a log file, a pipe, systemd) nothing is written: logs stay logs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class WatermarkDrops:
    """Rows the stateful operators of each query dropped because they came behind the
    watermark (``numRowsDroppedByWatermark`` of its ``stateOperators``), summed over
    its micro-batches: Spark reports them per batch, and keeps only the last hundred
    reports.  The daemon looks at each query's last report (one py4j call) about once
    a second; when batches went by meanwhile, or the query started again (a new run id:
    its batch ids go on from its checkpoint), it reads the recent ones too, so that
    each batch is counted once."""

    dropped: dict[str, int] = field(default_factory=dict)  # query -> rows
    counted: dict[str, tuple[str, int]] = field(default_factory=dict)  # query -> run, batch

    def update(self, query: str, last: Any, recent: Callable[[], Sequence[Any]]) -> int:
        """Count the batches of ``query`` not counted yet (``last``: its lastProgress,
        ``recent``: reads its recentProgress); the rows it dropped so far."""
        total = self.dropped.setdefault(query, 0)
        if last is None:
            return total
        run, batch = str(last.runId), int(last.batchId)
        seen_run, seen_batch = self.counted.get(query, (run, -1))
        if seen_run != run:
            seen_batch = -1  # a new run: none of its batches is counted yet
        if batch <= seen_batch:
            return total
        if not last.stateOperators:  # a stateless query drops nothing: no recent reads
            self.counted[query] = (run, batch)  # (its 100 reports cost py4j and JSON)
            return total
        reports = [last] if batch == seen_batch + 1 else list(recent())
        for report in reports:
            if str(report.runId) == run and seen_batch < int(report.batchId) <= batch:
                total += sum(op.numRowsDroppedByWatermark or 0 for op in report.stateOperators)
        self.dropped[query] = total
        self.counted[query] = (run, batch)
        return total


@dataclass
class QueryCount:
    """What one query has done so far (batch ids already counted, rows read)."""

    batches: set[int] = field(default_factory=set)
    rows: int = 0

    def update(self, progress: Sequence[Any]) -> None:
        """Count the batches of Spark's recent progress reports not counted yet."""
        for entry in progress:
            if entry.batchId not in self.batches:
                self.batches.add(entry.batchId)
                self.rows += entry.numInputRows or 0


@dataclass
class RunProgress:
    """The counts of every query of one run, and when it started."""

    total_events: int | None = None
    started: float = field(default_factory=time.monotonic)
    queries: dict[str, QueryCount] = field(default_factory=dict)

    def line(self, reports: Mapping[str, Sequence[Any]], tasks: tuple[int, int]) -> str:
        """One line: per query its batches and rows, the running tasks, the time."""
        parts = []
        for name, progress in reports.items():
            count = self.queries.setdefault(name, QueryCount())
            count.update(progress)
            read = f"{count.rows:,} rows"
            if name == "stateless" and self.total_events:
                share = min(100, 100 * count.rows // self.total_events)
                read = f"{count.rows:,}/{self.total_events:,} events ({share}%)"
            parts.append(f"{name}: {len(count.batches)} batch(es), {read}")
        done, total = tasks
        if total:
            parts.append(f"tasks {done}/{total}")
        parts.append(f"{time.monotonic() - self.started:.0f}s")
        return " | ".join(parts)


def running_tasks(spark_context: Any) -> tuple[int, int]:
    """(completed, all) tasks of the stages running now (Spark's status tracker)."""
    tracker = spark_context.statusTracker()
    done = total = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total


class TerminalProgress:
    """Writes progress lines over each other on a terminal; nothing elsewhere."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self._width = 0

    def __call__(self, line: str) -> None:
        if not self.enabled:
            return
        padding = " " * max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write(f"\r{line}{padding}")
        self.stream.flush()

    def close(self) -> None:
        """End the line, so that what follows starts on a line of its own."""
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
