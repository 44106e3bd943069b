"""The frontier log: the rows the stateless query computes for stateful nodes.

``live/batch-<id>.parquet`` holds one micro-batch of the stateless query: the events
of each frontier node under its node id, the heartbeats (key null) and one time mark
(key ``~tick``: the latest time the batch saw, so every source moves the stateful
queries' watermark, as the spool does).  ``backfill-<generation>/`` holds what a
generation started later needs from before it.  Files are written atomically
(temporary name, then rename) and named by batch id: a replayed batch rewrites the
same file.  Each generation reads ``live`` and its own backfill as one file stream.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from roses_app.algebra.program import TICK

FRONTIER_DDL = "key STRING, ts BIGINT, seq BIGINT, item STRING, origin STRING"
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),
        ("item", pa.string()),
        ("origin", pa.string()),
    ]
)
FrontierRow = tuple[str | None, int, int, str | None]  # key, ts, seq, item


@dataclass(frozen=True)
class FrontierLog:
    root: Path

    @property
    def live(self) -> Path:
        return self.root / "live"

    def backfill(self, generation: str) -> Path:
        return self.root / f"backfill-{generation}"

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def write_live(
        self, batch_id: int, rows: Sequence[FrontierRow], latest_ts: int, latest_seq: int
    ) -> None:
        _write(self.live, f"batch-{batch_id:012d}.parquet", rows, latest_ts, latest_seq, "l")

    def write_backfill(
        self, generation: str, rows: Sequence[FrontierRow], latest_ts: int, latest_seq: int
    ) -> None:
        _write(self.backfill(generation), "backfill.parquet", rows, latest_ts, latest_seq, "b")

    def stream(self, spark: SparkSession, generation: str) -> DataFrame:
        """The live log and ``generation``'s backfill, as one streaming DataFrame."""
        self.live.mkdir(parents=True, exist_ok=True)
        self.backfill(generation).mkdir(parents=True, exist_ok=True)
        pattern = f"{self.root}/{{live,backfill-{generation}}}/*.parquet"
        return spark.readStream.schema(FRONTIER_DDL).parquet(pattern)


def _write(
    folder: Path,
    name: str,
    rows: Sequence[FrontierRow],
    latest_ts: int,
    latest_seq: int,
    origin: str,
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    every = [*rows, (TICK, latest_ts, latest_seq, None)]
    columns = list(zip(*every, strict=True))
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA, strict=False)]
    arrays.append(pa.array([origin] * len(every), type=pa.string()))
    tmp = folder.parent / f".{folder.name}-{name}.tmp"
    pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, folder / name)
