"""The frontier log: the rows the stateless query computes for stateful nodes.

Each generation (a stateful query) has its own folder, ``frontier/GEN/``:

* ``live/batch-<epoch>-<id>.parquet``: one micro-batch of the stateless query (the
  epoch counts its fresh checkpoints, see :mod:`.fresh_checkpoint`): the events of
  each frontier node under its node id, the heartbeats (key null) and one time mark
  (key ``~tick``: the latest time the batch saw, so every source moves the stateful
  queries' watermark, as the spool does).  The file is written once and hard-linked
  into every generation's folder;
* ``backfill/backfill.parquet``: what a generation started later needs from before.

Files are written under a temporary name and renamed (atomic), and named by batch id:
a replayed batch rewrites the same file.  A generation reads its folder as one file
stream that deletes the files of its committed batches (``cleanSource: delete``), so
nothing piles up and each trigger lists only what is new.
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

from roses_app.algebra.planner.program import TICK

FRONTIER_DDL = "key STRING, ts BIGINT, seq BIGINT, item STRING, event BIGINT, origin STRING"
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("ts", pa.int64()),
        ("seq", pa.int64()),
        ("item", pa.string()),
        ("event", pa.int64()),
        ("origin", pa.string()),
    ]
)
# key, ts (ingest time), seq, item, event (the item's publication time, for a source
# read in publication time, when it is not its ingest time)
FrontierRow = tuple[str | None, int, int, str | None, int | None]


@dataclass(frozen=True)
class FrontierLog:
    root: Path

    def folder(self, generation: str) -> Path:
        return self.root / generation

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def remove(self, generation: str) -> None:
        shutil.rmtree(self.folder(generation), ignore_errors=True)

    def prepare(self, generation: str) -> None:
        (self.folder(generation) / "live").mkdir(parents=True, exist_ok=True)
        (self.folder(generation) / "backfill").mkdir(parents=True, exist_ok=True)

    def write_live(
        self,
        generations: Sequence[str],
        batch_id: int,
        rows: Sequence[FrontierRow],
        latest_ts: int,
        latest_seq: int,
        epoch: int = 0,
    ) -> None:
        """One stateless micro-batch's frontier rows, for every generation."""
        name = f"batch-{epoch:06d}-{batch_id:012d}.parquet"
        staged = _staged(self.root, name, rows, latest_ts, latest_seq, "l")
        try:
            for generation in generations:
                folder = self.folder(generation) / "live"
                link = folder.parent / f".{name}.tmp"
                link.unlink(missing_ok=True)
                os.link(staged, link)
                os.replace(link, folder / name)
        finally:
            staged.unlink(missing_ok=True)

    def write_backfill(
        self, generation: str, rows: Sequence[FrontierRow], latest_ts: int, latest_seq: int
    ) -> None:
        staged = _staged(self.root, "backfill.parquet", rows, latest_ts, latest_seq, "b")
        os.replace(staged, self.folder(generation) / "backfill" / "backfill.parquet")

    def stream(self, spark: SparkSession, generation: str) -> DataFrame:
        """A generation's live rows and backfill, as one streaming DataFrame."""
        self.prepare(generation)
        pattern = f"{self.folder(generation)}/{{live,backfill}}/*.parquet"
        reader = spark.readStream.schema(FRONTIER_DDL).option("cleanSource", "delete")
        return reader.parquet(pattern)


def _staged(
    root: Path,
    name: str,
    rows: Sequence[FrontierRow],
    latest_ts: int,
    latest_seq: int,
    origin: str,
) -> Path:
    """The rows and a time mark as a Parquet file, fsynced, under ``root/.staging``."""
    staging = root / ".staging"
    staging.mkdir(parents=True, exist_ok=True)
    every = [*rows, (TICK, latest_ts, latest_seq, None, None)]
    columns = list(zip(*every, strict=True))
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA, strict=False)]
    arrays.append(pa.array([origin] * len(every), type=pa.string()))
    path = staging / name
    pq.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA), path)
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
    return path
