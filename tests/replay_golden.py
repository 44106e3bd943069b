"""The golden replay outputs: one canonical text per fixture and engine.

``tests/data/replay_golden/FIXTURE.ENGINE.txt`` holds the outputs of every fixture of
``tests/data/replay/`` as the code recorded them, through the reference engine
(``tests/test_replay_golden.py``) and through Spark (the Spark test of
``tests/test_replay.py``, which runs each fixture on Spark once for both checks).
Issue 45 merges the operators of ingest time and publication time; these files show
that no replay output changed by a byte.

To record them again on purpose (a change meant to change an output), set
``ROSES_RECORD_GOLDEN=1``:

    ROSES_RECORD_GOLDEN=1 .venv/bin/python -m pytest tests/test_replay_golden.py \\
        tests/test_replay.py -k "outputs_are_the_recorded or spark_engine_matches"

and review the diff of ``tests/data/replay_golden/`` before committing it.  Without
the variable a missing file fails, so a check never passes by recording.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from roses_app.replay import Outputs

GOLDEN = Path(__file__).resolve().parent / "data" / "replay_golden"
ENGINES = ("reference", "spark")


def canonical(outputs: Outputs) -> str:
    """The text of ``outputs``: one section per output feed (stream, then the split's
    part), in name order, empty feeds included; one line per event, in the engine's
    order: its time, its seq (which orders the events of one time), its item as JSON
    (``null`` for a heartbeat).  Stricter than the fixtures' ``expected/`` files."""
    lines: list[str] = []
    for stream in sorted(outputs):
        for part in sorted(outputs[stream]):
            lines.append(f"== {stream}/{part}" if part else f"== {stream}")
            for event in outputs[stream][part]:
                item = json.dumps(event.item, ensure_ascii=False)
                lines.append(f"{event.ts}\t{event.seq}\t{item}")
    return "\n".join(lines) + "\n"


def golden_path(fixture: Path, engine: str) -> Path:
    return GOLDEN / f"{fixture.name}.{engine}.txt"


def check_golden(fixture: Path, engine: str, outputs: Outputs) -> None:
    """Fails unless ``outputs`` are byte for byte the recorded ones (records them
    first with ``ROSES_RECORD_GOLDEN=1``)."""
    path = golden_path(fixture, engine)
    text = canonical(outputs).encode()
    if os.environ.get("ROSES_RECORD_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text)
    assert path.exists(), f"no golden file {path.name}: record it with ROSES_RECORD_GOLDEN=1"
    golden = path.read_bytes()
    if text != golden:  # the first line that differs, not a diff of thousands
        pairs = zip(text.splitlines(), golden.splitlines(), strict=False)
        first = next((n for n, (a, b) in enumerate(pairs, 1) if a != b), None)
        pytest.fail(f"{path.name} differs (first at line {first}); now:\n{text.decode()}")
