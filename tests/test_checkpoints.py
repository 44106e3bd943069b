"""A checkpoint left by a process killed in the middle of writing one of its files
(``kill -9`` while Spark plans a micro-batch): the next start removes the unfinished
file and goes on, instead of failing on it at every retry."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from test_globalplan import VOLCANO, numbered_events, write_spool

from roses_app.algebra.plan.operators import Stream
from roses_app.algebra.reference.evaluator import evaluate_streams
from roses_app.replay import MemorySink
from roses_app.spark.layout import clear_unfinished_writes


def unfinished(folder: Path, name: str) -> list[Path]:
    """The two files Spark's checkpoint file manager has written for ``name`` before
    it renames the first: ``.NAME.UUID.tmp`` and its checksum."""
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{name}.{uuid.uuid4()}.tmp"
    temp.write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n')
    crc = folder / f".{temp.name}.crc"
    crc.write_bytes(b"crc")
    return [temp, crc]


def test_only_the_unfinished_writes_of_the_metadata_and_logs_go(tmp_path: Path) -> None:
    checkpoint = tmp_path / "stateless"
    left = unfinished(checkpoint / "offsets", "0") + unfinished(checkpoint, "metadata")
    left += unfinished(checkpoint / "sources" / "0", "3") + unfinished(checkpoint / "commits", "2")
    offsets, sources = checkpoint / "offsets", checkpoint / "sources" / "0"
    kept = [checkpoint / "metadata", offsets / "1", offsets / ".1.crc", sources / "2.compact"]
    kept.append(checkpoint / "commits" / "1")
    for path in kept:
        path.write_text("v1")
    state = unfinished(checkpoint / "state" / "0" / "0", "1.zip")  # the state store's own
    assert sorted(clear_unfinished_writes(checkpoint)) == sorted(left)
    assert all(path.exists() for path in kept + state)
    assert not any(path.exists() for path in left)
    assert clear_unfinished_writes(tmp_path / "none") == []


@pytest.mark.spark
def test_a_query_killed_while_planning_its_first_batch_starts_again(
    tmp_path: Path, spark: Any
) -> None:
    """The checkpoint a kill -9 left in CI: the query's id and its file-source log
    written, batch 0's offsets file not yet renamed.  Spark 4 would refuse it
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY, at every retry)."""
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries

    events = numbered_events(12)
    write_spool(tmp_path / "log", "0.jsonl", events)
    checkpoint = tmp_path / "checkpoints" / "stateless"
    checkpoint.mkdir(parents=True)
    (checkpoint / "metadata").write_text('{"id":"5f1f6a3e-0d38-4f0e-9a34-2b1f7f1f9c11"}')
    left = unfinished(checkpoint / "offsets", "0")
    streams = [Stream("volcano", VOLCANO)]
    sink = MemorySink([s.name for s in streams])
    engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True)
    await_all(start_queries(engine, streams))
    assert sorted(sink.collected["volcano"][""]) == evaluate_streams(streams, events)["volcano"][""]
    assert not any(path.exists() for path in left)
    assert (checkpoint / "commits" / "0").exists()
