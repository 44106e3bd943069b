"""The stateless query's checkpoint started afresh once Spark's file-source log has
grown (``roses_app.spark.fresh_checkpoint``): nothing lost, nothing read twice, the stateful
queries unaware."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_globalplan import DIGEST, VOLCANO, numbered_events, write_spool

from roses_app.algebra.plan.operators import Aggregate, Stream, TimeWindow, Window
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.replay import MemorySink
from roses_app.spark import fresh_checkpoint as rb


def spark_log(folder: Path, batch: int, paths: list[Path], compact: bool = False) -> None:
    """A file of Spark's file-source log, in its format: a version line, then one
    JSON entry per file."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = [
        json.dumps({"path": p.absolute().as_uri(), "timestamp": 1, "batchId": batch}) for p in paths
    ]
    name = f"{batch}.compact" if compact else str(batch)
    (folder / name).write_text("\n".join(["v1", *entries]))


def checkpoint_with(tmp_path: Path, committed: int, planned: int) -> tuple[Path, Path, Path]:
    """A checkpoint whose source log names log/a, log/b (compact at 1) and log/c
    (delta 2); log/d was never read.  Returns the checkpoint, log and archive folders."""
    log, archive, checkpoint = tmp_path / "log", tmp_path / "archive", tmp_path / "cp"
    log.mkdir()
    for name in "abcd":
        (log / f"{name}.jsonl").write_text(name)
    sources = checkpoint / "sources" / "0"
    spark_log(sources, 0, [log / "gone.jsonl"])  # before the compact file: not read
    spark_log(sources, 1, [log / "a.jsonl", log / "b.jsonl"], compact=True)
    spark_log(sources, 2, [log / "c.jsonl"])
    for folder, last in (("offsets", planned), ("commits", committed)):
        (checkpoint / folder).mkdir()
        for n in range(last + 1):
            (checkpoint / folder / str(n)).write_text("v1")
    (checkpoint / "metadata").write_text('{"id": "x"}')
    return checkpoint, log, archive


def test_the_source_log_read_is_the_latest_compact_file_and_the_deltas_after_it(
    tmp_path: Path,
) -> None:
    checkpoint, log, _ = checkpoint_with(tmp_path, 2, 2)
    assert rb.processed_files(checkpoint) == {
        (log / n).absolute() for n in ("a.jsonl", "b.jsonl", "c.jsonl")
    }
    assert rb.log_bytes(checkpoint) > 0
    assert rb.rebase_due(checkpoint, limit=0) and not rb.rebase_due(checkpoint, limit=10**6)


def test_a_rebase_archives_what_was_read_and_empties_the_checkpoint(tmp_path: Path) -> None:
    checkpoint, log, archive = checkpoint_with(tmp_path, 2, 2)
    forgotten: list[bool] = []
    assert rb.rebase(checkpoint, log, archive, lambda: forgotten.append(True))
    assert sorted(p.name for p in log.iterdir()) == ["d.jsonl"]  # never read: stays
    moved = sorted(p.name for p in archive.rglob("*.jsonl"))
    assert moved == ["a.jsonl", "b.jsonl", "c.jsonl"]
    # below the archive at their full path, as Spark's cleanSource puts them
    assert (archive / (log / "a.jsonl").absolute().relative_to("/")).exists()
    assert [p.name for p in checkpoint.iterdir()] == [rb.EPOCH_FILE]
    assert rb.read_epoch(checkpoint) == 1 and forgotten == [True]
    # a second rebase of the (now empty) checkpoint counts on
    assert rb.rebase(checkpoint, log, archive, lambda: None) and rb.read_epoch(checkpoint) == 2


def test_a_batch_planned_and_not_committed_keeps_its_checkpoint(tmp_path: Path) -> None:
    checkpoint, log, archive = checkpoint_with(tmp_path, 1, 2)
    assert not rb.rebase_due(checkpoint, limit=0)
    assert not rb.rebase(checkpoint, log, archive, lambda: None)
    assert len(list(log.iterdir())) == 4 and (checkpoint / "offsets" / "2").exists()


def test_a_rebase_cut_short_after_its_commit_point_is_finished(tmp_path: Path) -> None:
    checkpoint, _, _ = checkpoint_with(tmp_path, 2, 2)
    (checkpoint / "roses-epoch.next").write_text("1")  # died right after the commit point
    forgotten: list[bool] = []
    rb.finish_rebase(checkpoint, lambda: forgotten.append(True))
    assert [p.name for p in checkpoint.iterdir()] == [rb.EPOCH_FILE]
    assert rb.read_epoch(checkpoint) == 1 and forgotten == [True]
    rb.finish_rebase(checkpoint, lambda: forgotten.append(True))  # nothing pending: a no-op
    assert forgotten == [True]


STREAMS = [
    Stream("volcano", VOLCANO),
    Stream("hourly", Aggregate(Window(VOLCANO, TimeWindow(10, 10)), DIGEST, "hourly")),
]


@pytest.mark.spark
def test_rebased_runs_give_the_reference_output_once(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs over a growing spool, the second and third each on a fresh
    checkpoint: every stream's output is the reference's, no row written twice, and
    the stateful query (reading the frontier files of the new epochs) missed nothing."""
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, start_queries

    monkeypatch.setattr(rb, "REBASE_LOG_BYTES", 0)  # due at every start
    sink = MemorySink([s.name for s in STREAMS])
    checkpoint = tmp_path / "checkpoints" / "stateless"
    every: list[RefInput] = []
    for run in range(3):
        events = numbered_events(24, 1 + 24 * run, start=1 + 24 * run)
        every += events
        for k in range(2):  # two spool files a run
            write_spool(tmp_path / "log", f"{run}-{k}.jsonl", events[k * 12 : (k + 1) * 12])
        engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True)
        await_all(start_queries(engine, STREAMS))
        assert rb.read_epoch(checkpoint) == run  # the first run had no checkpoint yet
    heartbeat = RefInput("", 10**4, 1 + 24 * 3, None)
    write_spool(tmp_path / "log", "end.jsonl", [heartbeat])
    await_all(
        start_queries(Engine(spark, (), tmp_path / "log", tmp_path, sink, once=True), STREAMS)
    )
    expected = evaluate_streams(STREAMS, [*every, heartbeat])
    for stream in STREAMS:
        written = sink.collected[stream.name].get("", [])
        assert len(written) == len(set(written)), f"{stream.name}: rows written twice"
        assert sorted(written) == expected[stream.name][""], stream.name
    assert sink.position("stateless") == 1 + 24 * 3  # the position went on across rebases
    # what the fresh checkpoints read: only the files no earlier batch had read
    assert rb.processed_files(checkpoint) == {(tmp_path / "log" / "end.jsonl").absolute()}


@pytest.mark.spark
def test_a_running_stateless_query_is_rebased_between_two_batches(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the daemon does at its compaction time: stop the stateless query after its
    batch, start its checkpoint afresh, start it again; the stateful query runs on."""
    import time

    from roses_app.spark.queries import stop_gracefully
    from roses_app.spark.runner import Engine, start_queries

    def wait_for(check: Any, what: str) -> None:
        deadline = time.monotonic() + 120
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.2)

    sink = MemorySink([s.name for s in STREAMS])
    engine = Engine(spark, (), tmp_path / "log", tmp_path, sink, trigger_seconds=0.5)
    first, second = numbered_events(24), numbered_events(24, 25, start=25)
    heartbeat = RefInput("", 10**4, 49, None)
    write_spool(tmp_path / "log", "1.jsonl", first)
    running = start_queries(engine, STREAMS)
    try:
        checkpoints = tmp_path / "checkpoints"
        # Spark commits a batch after its sink has written it: only then is it due
        wait_for(
            lambda: (
                sink.position("stateless") == 24 and rb.all_committed(checkpoints / "stateless")
            ),
            "the first file, committed",
        )
        assert not rb.rebase_running(checkpoints, tmp_path / "log", sink, running)  # not due
        monkeypatch.setattr(rb, "REBASE_LOG_BYTES", 0)
        assert rb.rebase_running(checkpoints, tmp_path / "log", sink, running)
        assert running[0].query.isActive and rb.read_epoch(checkpoints / "stateless") == 1
        rest = [*second, heartbeat]
        write_spool(tmp_path / "log", "2.jsonl", rest)
        expected = evaluate_streams(STREAMS, [*first, *rest])
        wait_for(
            lambda: len(sink.collected["hourly"].get("", [])) >= len(expected["hourly"][""]),
            "the stateful query's windows",
        )
    finally:
        stop_gracefully(running)
    for stream in STREAMS:
        assert sorted(sink.collected[stream.name].get("", [])) == expected[stream.name][""]
