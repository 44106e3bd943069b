"""Common sub-plans of different streams are computed once (views on Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roses_app.algebra.plan import Filter, Map, Source, Stream, TimeWindow, Union, Window
from roses_app.algebra.reference import RefInput, evaluate_streams
from roses_app.algebra.sharing import share, shared_subplans, view_name

HOT = Filter(Source("a"), "contains(title, 'hot')")


def test_the_largest_common_stateless_sub_plan_is_shared() -> None:
    streams = [
        Stream("titles", Map(HOT, "title")),
        Stream("links", Map(HOT, "link")),
        Stream("both", Union((HOT, Source("b")))),
        Stream("alone", Filter(Source("b"), "true()")),
    ]
    assert shared_subplans(streams) == [HOT]
    shared = share(streams)
    name = view_name(HOT)
    assert shared.views == {name: HOT}
    assert shared.streams[0].plan == Map(Source(name), "title")
    assert shared.streams[2].plan == Union((Source(name), Source("b")))
    assert shared.streams[3].plan == streams[3].plan  # nothing shared there


def test_sources_and_stateful_plans_are_not_views() -> None:
    window = Window(HOT, TimeWindow(5))
    streams = [Stream("x", Map(window, "title")), Stream("y", Map(window, "link"))]
    # the window is stateful: only the filter below it is shared
    assert shared_subplans(streams) == [HOT]
    assert shared_subplans([Stream("x", Source("a")), Stream("y", Source("a"))]) == []


def test_view_names_follow_the_plan_not_where_it_was_written() -> None:
    from roses_app.algebra.plan import Origin

    moved = Filter(Source("a"), "contains(title, 'hot')", origin=Origin("other.yaml", 9))
    assert view_name(moved) == view_name(HOT)
    assert view_name(Filter(Source("a"), "true()")) != view_name(HOT)


EVENTS = [
    RefInput("a", 1, 1, "<item><title>hot one</title><link>http://x/1</link></item>"),
    RefInput("a", 2, 2, "<item><title>cold</title><link>http://x/2</link></item>"),
    RefInput("a", 3, 3, "<item><title>hot two</title><link>http://x/3</link></item>"),
    RefInput("", 9, 4, None),
]


@pytest.mark.spark
def test_spark_computes_a_shared_filter_once_into_a_view(spark: object, tmp_path: Path) -> None:
    from roses_app.items import Event
    from roses_app.spark.runner import await_all, start_queries
    from roses_app.spool import write_events

    streams = [Stream("titles", Map(HOT, "title")), Stream("links", Map(HOT, "link"))]
    log_dir = tmp_path / "log"
    write_events(log_dir / "events.jsonl", [Event(e.source, e.ts, e.seq, e.item) for e in EVENTS])
    got: dict[str, list[tuple[int, str]]] = {"titles": [], "links": []}

    def sink(_qid: str, _batch: int, rows: list[tuple[str, str, int, int, str]]) -> None:
        for stream, _part, ts, _seq, item in rows:
            got[stream].append((ts, item))

    queries = start_queries(
        spark,  # type: ignore[arg-type]
        streams,
        (),
        log_dir,
        tmp_path / "checkpoints",
        sink,
        once=True,
        views_root=tmp_path / "views",
    )
    await_all(queries)
    assert [q.stream for q in queries] == [view_name(HOT), "titles", "links"]
    # the view holds the filter's result once, heartbeat included
    (folder,) = (tmp_path / "views").iterdir()
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.open()]
    assert sorted((r["ts"], r["item"] is None) for r in rows) == [(1, False), (3, False), (9, True)]
    expected = evaluate_streams(streams, EVENTS)
    for stream in got:
        assert sorted(got[stream]) == [(e.ts, e.item) for e in expected[stream][""]]
