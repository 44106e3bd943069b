"""Files written on a few threads (roses_app.writes): every write done, the first
error raised and nothing written after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from roses_app.algebra.reference.evaluator import RefEvent
from roses_app.replay import write_outputs
from roses_app.writes import ParallelWrites


def test_every_write_is_done(tmp_path: Path) -> None:
    with ParallelWrites(threads=3, batch=7) as writes:
        for n in range(200):
            writes.submit((tmp_path / f"f{n}").write_bytes, b"x" * n)
    assert all((tmp_path / f"f{n}").read_bytes() == b"x" * n for n in range(200))
    assert len(list(tmp_path.iterdir())) == 200


def test_the_first_error_is_raised_when_the_block_ends(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), ParallelWrites() as writes:
        writes.submit((tmp_path / "g").write_bytes, b"y")
        writes.submit((tmp_path / "no-such-folder" / "f").write_bytes, b"x")
    assert (tmp_path / "g").read_bytes() == b"y"


def test_a_failed_batch_stops_the_caller_and_the_later_batches(tmp_path: Path) -> None:
    submitted = 0
    with pytest.raises(FileNotFoundError), ParallelWrites(threads=2, batch=2) as writes:
        for n in range(100):
            folder = tmp_path if n else tmp_path / "missing"
            writes.submit((folder / f"f{n}").write_bytes, b"x")
            submitted += 1
    assert submitted == 1  # the second submit ran the batch and raised
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f1"]


def test_a_replay_output_that_cannot_be_written_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "b.jsonl").mkdir()  # a folder where the stream's file goes
    outputs = {
        "a": {"": [RefEvent(1, 0, "<item><title>a</title></item>")]},
        "b": {"": [RefEvent(2, 0, "<item><title>b</title></item>")]},
    }
    with pytest.raises(IsADirectoryError):
        write_outputs(outputs, tmp_path, iso_times=False)
    assert (
        tmp_path / "a.jsonl"
    ).read_text() == '{"ts": 1, "item": "<item><title>a</title></item>"}\n'
