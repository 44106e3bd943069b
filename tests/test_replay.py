"""Replay fixtures: a config, an event list and the expected output files.

Each fixture runs through the reference evaluator and through Spark; both must write
exactly the expected files, and Spark's events must be the reference's, seq included,
and the recorded ones (``tests/replay_golden.py``).
(The test modules of each operator family check more on the same fixtures without
running them through Spark again.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from replay_golden import check_golden

from roses_app.algebra.reference.evaluator import RefEvent
from roses_app.config import load_config
from roses_app.replay import (
    MemorySink,
    ReplayInputError,
    ReplayReadError,
    read_events,
    replay,
    run_reference,
    run_spark,
    write_outputs,
)

DATA = Path(__file__).resolve().parent / "data"

FIXTURES = sorted(p for p in (DATA / "replay").iterdir() if (p / "events.jsonl").exists())


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.jsonl"))}


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_reference_engine_matches_expected(fixture: Path, tmp_path: Path) -> None:
    config = load_config(fixture / "feeds.yaml")
    replay(config, fixture / "events.jsonl", tmp_path, "reference")
    assert tree(tmp_path) == tree(fixture / "expected")


@pytest.mark.spark
@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.name for p in FIXTURES])
def test_spark_engine_matches_expected(fixture: Path, tmp_path: Path, spark: object) -> None:
    config = load_config(fixture / "feeds.yaml")
    events = read_events(fixture / "events.jsonl")
    outputs = run_spark(config, events)
    assert outputs == run_reference(config, events)  # the same (ts, seq, item), in order
    write_outputs(outputs, tmp_path, events.iso_times)
    assert tree(tmp_path) == tree(fixture / "expected")
    check_golden(fixture, "spark", outputs)  # byte for byte as recorded (replay_golden.py)


@pytest.mark.spark
def test_a_spark_replay_reads_its_events_while_spark_starts(tmp_path: Path, spark: object) -> None:
    """``replay`` reads the events in a child process beside the session's start: the same
    files come out, and a broken line still fails the replay with its line number."""
    fixture = DATA / "replay" / "spine"
    config = load_config(fixture / "feeds.yaml")
    replay(config, fixture / "events.jsonl", tmp_path / "out", "spark")
    assert tree(tmp_path / "out") == tree(fixture / "expected")
    bad = tmp_path / "bad.jsonl"
    lines = (fixture / "events.jsonl").read_text().splitlines()
    bad.write_text("\n".join([lines[0], '{"source": "a", "ts": 2, "item": "<item>"}', *lines[1:]]))
    with pytest.raises(ReplayInputError, match=r"bad\.jsonl:2: "):
        replay(config, bad, tmp_path / "bad-out", "spark")
    assert not (tmp_path / "bad-out").exists()


def _dies(*args: object) -> None:
    os._exit(3)  # as a process the kernel kills for want of memory: no exception


def _disk_full(*args: object) -> None:
    raise OSError(28, "No space left on device")


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "failing", "message"),
    [
        ("_read_and_spool", _dies, "ended abruptly"),
        ("write_spool", _disk_full, r"cannot spool the events in .*No space left on device"),
    ],
)
def test_a_reading_process_that_fails_is_a_clear_error(
    tmp_path: Path,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    failing: object,
    message: str,
) -> None:
    """The child that reads and spools the events dies or cannot write: an error that
    says what to do, not a traceback of the process pool."""
    from roses_app import replay as module

    fixture = DATA / "replay" / "spine"
    monkeypatch.setattr(module, name, failing)
    with pytest.raises(ReplayReadError, match=message):
        replay(load_config(fixture / "feeds.yaml"), fixture / "events.jsonl", tmp_path, "spark")


def test_iso_times_come_back_as_iso(tmp_path: Path) -> None:
    fixture = DATA / "replay" / "spine"
    iso_events = tmp_path / "iso.jsonl"
    lines = (fixture / "events.jsonl").read_text().splitlines()
    with open(iso_events, "w") as fh:
        for line in lines:
            record = json.loads(line)
            record["ts"] = f"2024-05-0{record['ts']}T12:00:00+02:00"
            fh.write(json.dumps(record) + "\n")
    replay(load_config(fixture / "feeds.yaml"), iso_events, tmp_path / "out", "reference")
    first = json.loads((tmp_path / "out" / "volcano.jsonl").read_text().splitlines()[0])
    assert first["ts"] == "2024-05-01T10:00:00Z"


def test_bad_event_lines_are_all_reported_with_their_line(tmp_path: Path) -> None:
    events = tmp_path / "bad.jsonl"
    events.write_bytes(
        b'{"source": "a", "ts": 1, "item": "<item/>"}\n'
        b"not json\n"
        b'{"source": "a", "ts": 2}\n'
        b'{"source": "a", "ts": 3, "item": "<item><broken"}\n'
        b'{"source": "a", "ts": "yesterday", "item": "<item/>"}\n'
        b'{"source": "a", "ts": 6, "item": "<item>caf\xe9</item>"}\n'  # Latin-1, not UTF-8
        b'{"source": "a", "ts": 7, "item": "<item>caf\xc3\xa9</item>"}\n'
    )
    with pytest.raises(ReplayInputError) as info:
        read_events(events)
    message = str(info.value)
    for line in (2, 3, 4, 5, 6):
        assert f"bad.jsonl:{line}:" in message
    assert "bad.jsonl:1:" not in message and "bad.jsonl:7:" not in message
    assert "missing key(s): item" in message
    assert "bad.jsonl:6: not JSON: str is not valid UTF-8" in message


@pytest.mark.parametrize("iso", [False, True], ids=["ticks", "iso"])
def test_output_lines_are_what_json_dumps_writes(tmp_path: Path, iso: bool) -> None:
    from roses_app.algebra.reference.registry import RefEvent
    from roses_app.items import iso8601

    odd = '<item><title>é "quoted" \\ back\tslash \u2028 line</title></item>'
    plain = "<item><title>plain</title></item>"
    events = [RefEvent(-5, 1, odd), RefEvent(1_700_000_000_000_000, 2, plain), RefEvent(7, 3, odd)]
    write_outputs({"one": {"": events}, "two": {"x": events[:1]}}, tmp_path, iso)

    def lines(expected: list[RefEvent]) -> str:
        records = ({"ts": iso8601(e.ts) if iso else e.ts, "item": e.item} for e in expected)
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

    assert (tmp_path / "one.jsonl").read_text(encoding="utf-8") == lines(events)
    assert (tmp_path / "two" / "x.jsonl").read_text(encoding="utf-8") == lines(events[:1])


@settings(max_examples=400)
@given(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    st.integers(-(2**62), 2**62),
)
def test_any_item_text_comes_out_as_json_dumps_writes_it(text: str, ts: int) -> None:
    from roses_app.algebra.reference.registry import RefEvent
    from roses_app.replay import output_line

    expected = json.dumps({"ts": ts, "item": text}, ensure_ascii=False) + "\n"
    assert output_line(RefEvent(ts, 1, text), False) == expected.encode("utf-8")


# pieces of items: markup, references, names with and without prefixes, characters
# XML forbids or allows, declarations
XML_PIECES = st.sampled_from(
    [
        *("<item>", "</item>", "<a>", "</a>", "<b/>", "<a:b>", "</a:b>", "<x:c xmlns:x='u'>"),
        *("</x:c>", "<a xmlns='u'>", "<a xmlns:p=''>", "<a xml:lang='en'>", "<a b='1' b='2'>"),
        *("&amp;", "&foo;", "&e;", "&#1;", "&#x41;", "<!--", "-->", "<![CDATA[", "]]>"),
        *("<?pi x?>", "<!DOCTYPE a [<!ENTITY e 'v'>]>", "<!DOCTYPE a SYSTEM 'x'>"),
        *("<?xml version='1.0'?>", "<?xml version='1.0' encoding='latin-1'?>", "\ufeff"),
        *(" ", "\n", "é", "\x00", "\x0b", "\ud7ff", "\ufffe", "\U0001f600", "'", '"', "="),
        *("<", ">", "&", "]"),
    ]
)


@settings(max_examples=1500)
@given(st.lists(XML_PIECES, max_size=8).map("".join))
@example("<?xml version='1.0' encoding='latin-1'?><b/>")  # lxml: no such encoding
@example("<a:b/>")  # an unbound prefix: expat checks namespaces too
def test_an_item_is_checked_broken_exactly_when_lxml_cannot_parse_it(text: str) -> None:
    """A replay checks each item with expat first (a third of lxml's time); the
    verdict must be lxml's, whose parse the engines use."""
    from roses_app.items import check_item, parse_item

    def fails(check: object) -> bool:
        try:
            check(text)  # type: ignore[operator]
        except (SyntaxError, ValueError):  # lxml's XMLSyntaxError is a SyntaxError
            return True
        return False

    assert fails(check_item) == fails(parse_item)


def test_the_memory_sink_keeps_one_event_per_item_however_many_streams_have_it() -> None:
    """A thousand subscriptions matching one item hold one event object, not a
    thousand; the events stay each stream's, in their order."""
    item, other = "<item><title>a</title></item>", "<item><title>b</title></item>"
    rows = [(f"s{n}", "", 5, 1, item, "g") for n in range(1000)]
    rows += [("s0", "", 5, 2, other, "h"), ("s1", "", 5, 1, other, "h")]
    rows.append(("s1", "x", 5, 1, item, ""))
    sink = MemorySink([f"s{n}" for n in range(1000)])
    assert sink.write_batch("stateless", 0, rows, 2)
    first = sink.collected["s0"][""][0]
    assert first == RefEvent(5, 1, item)
    assert all(sink.collected[f"s{n}"][""][0] is first for n in range(1000))
    assert sink.collected["s0"][""] == [first, RefEvent(5, 2, other)]
    assert sink.collected["s1"] == {"": [first, RefEvent(5, 1, other)], "x": [first]}
    assert not sink.write_batch("stateless", 0, rows, 2)  # a batch is applied once


# What py4j's finalizer thread does, a second or so late, for a Python proxy of a Java
# object collected during the run: here after the JVM has exited, as it happened when
# the proxy's turn came while the JVM was exiting (4 replays in 14 ended with py4j's
# "Answer from Java side is empty" and its traceback after their last line).
_LATE_PROXY = """
import logging, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from pyspark import SparkContext
from roses_app.config.model import SparkSettings
from roses_app.spark.session import build_session, stop_jvm
spark = build_session(SparkSettings(master="local[1]"), Path(sys.argv[1]), finite=True)
proxy = spark.sparkContext._jsc.sc().conf()  # a Java object this process holds
total = spark.sparkContext.accumulator(0)  # the JVM connects to the accumulator server
spark.sparkContext.parallelize([1, 2]).foreach(lambda x: total.add(x))
gateway = SparkContext._gateway
stop_jvm(gateway.proc)
assert gateway.proc.returncode is not None
gateway._gateway_client.garbage_collect_object(proxy._target_id)
time.sleep(1.5)  # the accumulator server's handler polls its connection once a second
print("stopped", total.value)
"""


@pytest.mark.spark
def test_the_jvm_exit_prints_no_traceback(tmp_path: Path) -> None:
    """Neither a proxy collected late nor the accumulator server's connection, which
    the JVM closes as it exits (the server is not waited for: see session.py)."""
    cache = Path(__file__).resolve().parent.parent / ".cache" / "java"
    done = subprocess.run(
        [sys.executable, "-c", _LATE_PROXY, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped 3"
    assert "Traceback" not in done.stderr
    assert "Exception while sending command" not in done.stderr
