"""The spool: dedup, monotone timestamps, crash recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roses_app.items import Event
from roses_app.spool import Spool
from roses_app.spoolfiles import decode_lines, spool_line, write_events


def items(*guids: str) -> list[tuple[str, int | None]]:
    return [(f"<item><title>t{g}</title><guid>{g}</guid></item>", None) for g in guids]


def test_duplicates_are_dropped_and_updates_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path, clock=lambda: 1000)
    assert [e.seq for e in spool.append("a", items("1", "2", "2"))] == [1, 2]
    assert spool.append("a", items("1", "2")) == []
    # the same guid from another source, or with new content, is a new event
    again = spool.append("b", items("1"))
    changed = spool.append("a", [("<item><title>new</title><guid>1</guid></item>", None)])
    assert [e.seq for e in again + changed] == [3, 4]
    assert spool.count() == 4
    spool.close()
    assert Spool(tmp_path).count() == 4  # the count kept in memory agrees with the index


def test_timestamps_are_monotone_even_when_the_clock_goes_back(tmp_path: Path) -> None:
    times = iter([5000, 4000])
    spool = Spool(tmp_path, clock=lambda: next(times))
    first = spool.append("a", items("1", "2"))
    second = spool.append("a", items("3"))
    assert {e.ts for e in first} == {5000}
    assert second[0].ts == 5001
    spool.close()
    reopened = Spool(tmp_path, clock=lambda: 10)
    assert reopened.append("a", items("4"))[0].ts == 5002


def test_interrupted_append_is_reindexed_not_lost_or_repeated(tmp_path: Path) -> None:
    spool = Spool(tmp_path, clock=lambda: 1000)
    spool.append("a", items("1"))
    spool.close()
    # Simulate a crash after the rename into log/ but before the index commit.
    orphan = {"source": "a", "ts": 2000, "seq": 2, "item": items("2")[0][0], "published": None}
    from roses_app.items import dedup_key

    orphan["key"] = dedup_key("a", orphan["item"])
    (tmp_path / "log" / "00000000000000000002-deadbeef.jsonl").write_text(json.dumps(orphan) + "\n")
    (tmp_path / "tmp" / "half-written.jsonl").write_text("{")
    reopened = Spool(tmp_path, clock=lambda: 1500)
    assert reopened.append("a", items("1", "2")) == []
    new = reopened.append("a", items("3"))
    assert new[0].seq == 3 and new[0].ts == 2001
    assert [e.seq for e in reopened.events()] == [1, 2, 3]
    assert reopened.count() == 3  # the re-indexed item counted once
    assert not list((tmp_path / "tmp").iterdir())


def test_a_heartbeat_is_an_event_without_item_that_moves_time_on(tmp_path: Path) -> None:
    ticks = iter([100, 100, 100])
    spool = Spool(tmp_path / "spool", clock=lambda: next(ticks))
    (first,) = spool.append("a", [("<item><title>x</title></item>", None)])
    beat = spool.heartbeat()
    assert beat.item is None and beat.source == ""
    assert beat.ts > first.ts and beat.seq == first.seq + 1  # monotone, like any append
    assert spool.count() == 1  # heartbeats are not items: nothing to deduplicate
    assert [e.item is None for e in spool.events()] == [False, True]
    assert spool.last_ts() == beat.ts


def _archive_all(spool: Spool) -> None:
    """What Spark's file source does with committed files: move them to the archive,
    below their full path."""
    for path in sorted(spool.log_dir.glob("*.jsonl")):
        target = spool.archive_dir / str(path.parent).lstrip("/") / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)


def test_compaction_merges_archived_files_and_keeps_every_event(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    for n in range(20):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])
    spool.heartbeat()
    before = list(spool.events())
    _archive_all(spool)
    spool.append("a", [("<item><guid>late</guid></item>", None)])  # not committed yet
    assert spool.compact(min_files=16) == 21
    assert len(list(spool.archive_dir.rglob("*.jsonl"))) == 1
    assert len(list(spool.log_dir.glob("*.jsonl"))) == 1  # what Spark still has to read
    assert [e.seq for e in spool.events()] == [e.seq for e in before] + [22]
    assert spool.compact(min_files=16) == 0  # nothing new: the merged file stays
    spool.close()


def test_compaction_copies_the_files_in_seq_order_whatever_their_folders(
    tmp_path: Path,
) -> None:
    """The merged file is the archived files' lines one file after the other, by first
    seq (never read into memory and sorted): folders that list them out of order, and
    a file without its last newline, change nothing."""
    spool = Spool(tmp_path / "spool")
    for n in range(12):
        spool.append_many([("a", [(f"<item><guid>{n}-{k}</guid></item>", None) for k in range(3)])])
    before = list(spool.events())
    for k, path in enumerate(sorted(spool.log_dir.glob("*.jsonl"))):
        folder = spool.archive_dir / ("z" if k % 2 == 0 else "a") / str(11 - k)
        folder.mkdir(parents=True)
        path.rename(folder / path.name)
    cut = sorted(spool.archive_dir.rglob("*.jsonl"))[0]
    cut.write_bytes(cut.read_bytes().rstrip(b"\n"))
    assert spool.compact(min_files=2) == 12
    (merged,) = spool.archive_dir.rglob("*.jsonl")
    assert merged.name == f"merged-{before[0].seq:020d}-{before[-1].seq:020d}.jsonl"
    assert [(e.seq, e.item) for e in spool.events()] == [(e.seq, e.item) for e in before]
    assert merged.read_bytes().count(b"\n") == 36
    spool.close()


def test_a_compaction_cut_short_is_finished_or_undone(tmp_path: Path) -> None:
    from roses_app.spool import MARKER, finish_compaction

    spool = Spool(tmp_path / "spool")
    for n in range(3):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])
    _archive_all(spool)
    olds = sorted(spool.archive_dir.rglob("*.jsonl"))
    events = list(spool.events())
    # killed after the marker, before the merged file was renamed in place: undone
    (spool.archive_dir / MARKER).write_text(
        "merged-x.jsonl\n" + "\n".join(str(p.relative_to(spool.archive_dir)) for p in olds)
    )
    finish_compaction(spool.archive_dir)
    assert sorted(spool.archive_dir.rglob("*.jsonl")) == olds and list(spool.events()) == events
    # killed after the rename, before the old files were removed: finished on open
    spool.compact(min_files=1)
    assert list(spool.events()) == events
    spool.close()
    merged = next(spool.archive_dir.glob("merged-*.jsonl"))
    (spool.archive_dir / MARKER).write_text(
        merged.name + "\n" + "\n".join(str(p.relative_to(spool.archive_dir)) for p in olds)
    )
    for path in olds:  # the old files are back, as if their removal never happened
        path.parent.mkdir(parents=True, exist_ok=True)
        write_events(path, [e for e in events if f"{e.seq:020d}" in path.name])
    reopened = Spool(tmp_path / "spool")
    assert list(reopened.events()) == events
    reopened.close()


def test_the_last_archived_seq_reads_only_the_newest_file(tmp_path: Path) -> None:
    from roses_app.spool import last_archived_seq

    spool = Spool(tmp_path / "spool")
    assert last_archived_seq(spool.archive_dir) == 0
    for n in range(5):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None), (f"<x>{n}</x>", None)])
    _archive_all(spool)
    assert last_archived_seq(spool.archive_dir) == 10
    spool.compact(min_files=1)  # one merged file: its name says it
    assert last_archived_seq(spool.archive_dir) == 10
    spool.close()


def test_a_read_up_to_a_time_stops_at_the_first_later_event_of_each_file(
    tmp_path: Path,
) -> None:
    """Pull queries read the spool up to the time asked: the events up to it and the
    first after it, whatever the files (archived, merged beside their old copies,
    still in the log), and nothing of a file past its first later event."""
    from roses_app.spoolfiles import read_spool

    times = iter(range(1000, 100_000, 1000))
    spool = Spool(tmp_path / "spool", clock=lambda: next(times))
    for n in range(6):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])
    _archive_all(spool)
    olds = sorted(spool.archive_dir.rglob("*.jsonl"))
    kept = {p: p.read_bytes() for p in olds}
    spool.compact(min_files=1)
    for path, data in kept.items():  # the old copies are back beside the merged file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for n in range(6, 9):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])  # in the log
    spool.close()
    every = read_spool(tmp_path / "spool")
    assert [e.ts for e in every] == [1000 * k for k in range(1, 10)]
    for until in (0, 999, 1000, 3500, 6000, 8999, 9000, 20_000):
        expected = [e for e in every if e.ts <= until]
        expected += [e for e in every if e.ts > until][:1]
        assert read_spool(tmp_path / "spool", until=until) == expected
    # the log's last file: a good first event, then lines that are not even JSON
    last = max(spool.log_dir.glob("*.jsonl"))
    last.write_bytes(last.read_bytes() + b"not json\n")
    assert read_spool(tmp_path / "spool", until=8000)[-1].ts == 9000
    with pytest.raises(ValueError):  # read to its end, that file is broken
        read_spool(tmp_path / "spool")


def test_a_read_from_a_time_skips_the_files_wholly_before_it(tmp_path: Path) -> None:
    """Pull queries of a time window read the spool from the window's start: every
    event from that time on is there, and the spool's first event (a message names
    its time), whatever the files (merged beside their old copies, still in the log);
    a file wholly before that time is read no further than its first line."""
    from roses_app.spoolfiles import read_spool

    times = iter(range(1000, 100_000, 1000))
    spool = Spool(tmp_path / "spool", clock=lambda: next(times))
    for n in range(4):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])
    _archive_all(spool)
    spool.compact(min_files=1)  # merged: events at 1000..4000
    for n in range(4, 8):
        spool.append("a", [(f"<item><guid>{n}-{k}</guid></item>", None) for k in range(2)])
    _archive_all(spool)
    olds = sorted(spool.archive_dir.rglob("[0-9]*.jsonl"))
    kept = {p: p.read_bytes() for p in olds}
    spool.compact(min_files=1)  # merged: events at 5000..8000, two each
    for path, data in kept.items():  # the old copies are back beside the merged file
        path.write_bytes(data)
    for n in range(8, 11):
        spool.append("a", [(f"<item><guid>{n}</guid></item>", None)])  # in the log
    spool.close()
    root = tmp_path / "spool"
    every = read_spool(root)
    pairs = [t for t in range(5000, 9000, 1000) for _ in "ab"]
    assert [e.ts for e in every] == [1000, 2000, 3000, 4000, *pairs, 9000, 10_000, 11_000]
    for since in (0, 1000, 1001, 4000, 4500, 5000, 6000, 6001, 8000, 9500, 11_000, 12_000):
        got = read_spool(root, since=since)
        assert got[0] == every[0]
        assert [e for e in got if e.ts >= since] == [e for e in every if e.ts >= since]
        assert set(got) <= set(every)
        for until in (5000, 9000, 20_000):
            cut = read_spool(root, since=since, until=until)
            assert [e for e in cut if since <= e.ts <= until] == [
                e for e in every if since <= e.ts <= until
            ]
    # the first event, then the log's: an event at 8000 could be followed by one at
    # 9000 in its file (times do not grow strictly), so a file is skipped only when
    # a later file starts before ``since``
    assert [e.ts for e in read_spool(root, since=9001)] == [1000, 9000, 10_000, 11_000]
    # the first merged file: its first event, then lines that are not even JSON
    first = min(spool.archive_dir.rglob("merged-*.jsonl"))
    first.write_bytes(first.read_bytes() + b"not json\n")
    assert [e.ts for e in read_spool(root, since=6000)][:2] == [1000, 5000]
    with pytest.raises(ValueError):  # read from the start, that file is broken
        read_spool(root, since=4000)
    # files Spool did not write (times do not always grow from file to file): an
    # event at the time the next file starts is still read from that time on
    other = tmp_path / "other"
    write_events(other / "log" / "00000000000000000001-a.jsonl", [Event("a", 5, 1, "<i/>")])
    write_events(other / "log" / "00000000000000000002-b.jsonl", [Event("a", 7, 2, "<i/>")])
    write_events(other / "log" / "00000000000000000003-c.jsonl", [Event("a", 7, 3, "<i/>")])
    assert [e.seq for e in read_spool(other, since=7)] == [1, 2, 3]
    assert [e.seq for e in read_spool(other, since=8)] == [1, 3]


def test_spool_lines_decode_to_the_events_written_and_the_rest_is_reported(
    tmp_path: Path,
) -> None:
    """The stage reads the spool as lines: what write_events wrote comes back field
    by field; a line that is not an event is reported with why, and left out."""
    events = [Event("F", 2, 1, "<item>é</item>", 7), Event("", 3, 2, None)]
    write_events(tmp_path / "e.jsonl", events)
    broken = [
        b'{"source": "F", "ts": 2',  # cut: not JSON
        b"[1, 2]",
        b'{"source": "F", "seq": 4, "item": "<i/>"}',  # no ts
        b'{"source": "F", "ts": true, "seq": 5, "item": "<i/>"}',  # a bool is no time
        b'{"source": 1, "ts": 6, "seq": 6, "item": "<i/>"}',
        b'{"source": "F", "ts": 7, "seq": 7, "item": "<i/>", "published": "x"}',
        b"  ",  # blank: skipped, as Spark's JSON reader did
    ]
    lines = (tmp_path / "e.jsonl").read_bytes().splitlines()
    bad: list[tuple[str, str]] = []
    decoded = decode_lines([*broken, *lines], lambda line, why: bad.append((line, why)))
    assert decoded == (["F", ""], [2, 3], [1, 2], ["<item>é</item>", None], [7, None])
    assert [why for _, why in bad] == [
        "not JSON",
        "not a JSON object",
        "no ts",
        *["a field of the wrong type"] * 3,
    ]
    assert bad[0][0] == '{"source": "F", "ts": 2'
    # a backfill reads up to a seq; text lines (str) decode as bytes do
    upto = decode_lines([line.decode() for line in lines], bad.append, max_seq=1)  # type: ignore[arg-type]
    assert upto == (["F"], [2], [1], ["<item>é</item>"], [7])


def test_a_replay_line_with_its_seq_put_in_reads_as_the_event_written() -> None:
    """A replay with integer times spools each input line with its seq put in: the
    stage reads the same event as from the line write_events makes."""
    given = [
        b'  {"source": "F", "ts": 2, "item": "<item>\\u00e9 \\"q\\"</item>", "published": 1}\r\n',
        b'{"ts": 9, "item": null}\n',  # a heartbeat
    ]
    written = [Event("F", 2, 7, '<item>é "q"</item>', 1), Event("", 9, 8, None)]
    lines = [spool_line(line, event.seq) for line, event in zip(given, written, strict=True)]
    assert all(line.endswith(b"}\n") for line in lines)
    bad: list[tuple[str, str]] = []
    sources, *rest = decode_lines(lines, lambda line, why: bad.append((line, why)))
    assert not bad and sources == ["F", None]  # no source: a heartbeat's, as ""
    assert rest == [[2, 9], [7, 8], ['<item>é "q"</item>', None], [1, None]]


@pytest.mark.spark
@pytest.mark.parametrize(
    "broken",
    [b'{"source": "F", "ts": 2\n', b'{"source": "F", "ts": "two", "seq": 9, "item": null}\n'],
)
def test_a_spool_line_that_is_not_an_event_is_counted_and_the_query_goes_on(
    spark: object, tmp_path: Path, broken: bytes
) -> None:
    """A damaged spool file must not stop the stateless query (it would fail again on
    every restart, on the same file); a stream added later reads up to the position."""
    from roses_app.algebra.plan.operators import Filter, Source, Stream
    from roses_app.replay import MemorySink
    from roses_app.spark.queries import await_all
    from roses_app.spark.runner import Engine, error_counter, start_queries

    def item(title: str) -> str:
        return f"<item><title>{title}</title><guid>{title}</guid></item>"

    log_dir = tmp_path / "spool" / "log"
    write_events(log_dir / "00000000000000000001-a.jsonl", [Event("F", 1, 1, item("lava 1"))])
    damaged = log_dir / "00000000000000000002-a.jsonl"
    write_events(damaged, [Event("F", 2, 2, item("lava 2")), Event("F", 3, 3, item("calm"))])
    damaged.write_bytes(broken + damaged.read_bytes())
    lava = Stream("lava", Filter(Source("F"), "contains(title, 'lava')"))
    every = Stream("every", Source("F"))
    sink = MemorySink(["lava", "every"])
    errors = error_counter(spark)  # type: ignore[arg-type]
    engine = Engine(spark, (), log_dir, tmp_path / "data", sink, once=True, errors=errors)  # type: ignore[arg-type]
    await_all(start_queries(engine, [lava]))
    assert sorted(e.seq for e in sink.collected["lava"][""]) == [1, 2]
    assert errors.value == {"spool": 1}
    # a new stream: computed over what the query has read (up to seq 3), then live
    write_events(log_dir / "00000000000000000004-a.jsonl", [Event("F", 4, 4, item("lava 4"))])
    await_all(start_queries(engine, [lava, every]))
    assert sorted(e.seq for e in sink.collected["every"][""]) == [1, 2, 3, 4]
    assert sorted(e.seq for e in sink.collected["lava"][""]) == [1, 2, 4]


def test_an_append_of_many_items_holds_no_buffer_per_line(tmp_path: Path) -> None:
    """orjson gives each line it makes a 4 kB buffer: the lines of an append are made
    and written a thousand at a time (all at once, 20,000 items held 80 MB more)."""
    import tracemalloc

    spool = Spool(tmp_path / "spool")
    items: list[tuple[str, int | None]] = [
        (f"<item><title>Item {k}</title><guid>http://example.org/{k}</guid></item>", None)
        for k in range(20_000)
    ]
    tracemalloc.start()
    try:
        spool.append("big", items)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 30 * 2**20, peak
    assert [e.item for e in spool.events()] == [xml for xml, _ in items]
