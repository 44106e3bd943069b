"""Every replay fixture's outputs through the reference engine, byte for byte as
recorded in ``tests/data/replay_golden/`` (see ``tests/replay_golden.py``: what the
files hold, how to record them again; the Spark engine's are checked by the Spark
test of ``tests/test_replay.py``, on the Spark run it makes anyway)."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_golden import ENGINES, GOLDEN, canonical, check_golden, golden_path

from roses_app.algebra.reference.registry import RefEvent
from roses_app.config import load_config
from roses_app.replay import Outputs, read_events, run_reference

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = sorted(p for p in (DATA / "replay").iterdir() if (p / "events.jsonl").exists())


def test_canonical_text_has_every_feed_event_and_seq() -> None:
    outputs: Outputs = {
        "b": {"": []},
        "a": {"x": [RefEvent(3, 7, "<item>é</item>")], "": [RefEvent(1, 2, None)]},
    }
    assert canonical(outputs) == '== a\n1\t2\tnull\n== a/x\n3\t7\t"<item>é</item>"\n== b\n'


def test_every_fixture_has_its_golden_files() -> None:
    for fixture in FIXTURES:
        for engine in ENGINES:
            assert golden_path(fixture, engine).exists(), (fixture.name, engine)
    # and no file of a fixture that is gone
    assert {p.name for p in GOLDEN.iterdir()} == {
        golden_path(f, e).name for f in FIXTURES for e in ENGINES
    }


def test_a_changed_output_fails_with_its_first_line(tmp_path: Path) -> None:
    fixture = FIXTURES[0]
    outputs = run_reference(
        load_config(fixture / "feeds.yaml"), read_events(fixture / "events.jsonl")
    )
    stream = sorted(outputs)[0]
    part = sorted(outputs[stream])[0]
    outputs[stream][part] = [RefEvent(0, 0, "<item>changed</item>"), *outputs[stream][part]]
    with pytest.raises(pytest.fail.Exception, match=r"differs \(first at line 2\)"):
        check_golden(fixture, "reference", outputs)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_reference_outputs_are_the_recorded_ones(fixture: Path) -> None:
    config = load_config(fixture / "feeds.yaml")
    check_golden(fixture, "reference", run_reference(config, read_events(fixture / "events.jsonl")))
