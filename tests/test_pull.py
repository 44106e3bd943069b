"""Pull queries (seed 003's lazy tasks, seed 002's WindowCall): a stream's content at a
time, from the spool, through ``content_at``, ``roses query`` and
``GET /streams/NAME?at=TIME`` on a real server."""

from __future__ import annotations

import json
from pathlib import Path

import feedparser
import httpx
import pytest

from roses_app.algebra.plan.operators import CountWindow, Filter, Source, Stream, TimeWindow, Window
from roses_app.algebra.reference.pull import PullQueryError, content_at
from roses_app.algebra.reference.registry import RefInput
from roses_app.cli import main
from roses_app.config import load_config
from roses_app.items import MICROS, iso8601
from roses_app.publish import HttpServer, create_app
from roses_app.publish.pull import PullQueries
from roses_app.spool import Spool
from roses_app.spoolfiles import first_seq, read_spool
from roses_app.store import Store

T0 = 1_795_000_000 * MICROS  # 2026-11-18, a whole second
MINUTE = 60 * MICROS


def item(n: int, topic: str = "news") -> str:
    return (
        f"<item><title>{topic} {n}</title><link>https://example.org/{n}</link>"
        f"<guid>https://example.org/{n}</guid><category>{topic}</category></item>"
    )


EVENTS = [RefInput("wire", T0 + k * MINUTE, k + 1, item(k)) for k in range(6)]


def titles(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.item.split("<title>")[1].split("<")[0] for e in events]


def test_a_window_stream_gives_its_window_at_the_time_asked() -> None:
    last3 = Stream("last3", Window(Source("wire"), CountWindow(3)))
    assert titles(content_at(last3, EVENTS, T0 + 4 * MINUTE)[""]) == ["news 4", "news 3", "news 2"]
    hour = Stream("recent", Window(Source("wire"), TimeWindow(150 * MICROS)))
    # [t − 150 s + 1 µs, t]: the items of the last two and a half minutes, newest first
    assert titles(content_at(hour, EVENTS, T0 + 5 * MINUTE)[""]) == ["news 5", "news 4", "news 3"]
    # a time between two items: what had come by then
    assert titles(content_at(last3, EVENTS, T0 + 2 * MINUTE + 1)[""]) == [
        "news 2",
        "news 1",
        "news 0",
    ]


def test_any_other_stream_gives_its_events_up_to_the_time() -> None:
    odd = Stream("odd", Filter(Source("wire"), "xs:integer(substring-after(title, ' ')) mod 2 = 1"))
    assert titles(content_at(odd, EVENTS, T0 + 4 * MINUTE)[""]) == ["news 3", "news 1"]
    assert content_at(odd, EVENTS, T0)[""] == []


def test_a_time_before_the_spool_is_refused_with_what_it_holds() -> None:
    with pytest.raises(PullQueryError, match="before the spool's first event"):
        content_at(Stream("s", Source("wire")), EVENTS, T0 - 1)


CONFIG = """
settings: {data_dir: ./data, http: {host: 127.0.0.1, port: 8080}}
sources:
  wire: {feed: "file:wire.xml"}
streams:
  last3:                # not published: still answers pull queries
    window: {from: wire, count: 3}
  topics:
    split: {from: wire, by: "string(category)"}
    publish: true
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "feeds.yaml").write_text(CONFIG)
    clock = iter(T0 + k * MINUTE for k in range(100))
    spool = Spool(tmp_path / "data" / "spool", clock=lambda: next(clock))
    try:
        for k in range(5):
            spool.append("wire", [(item(k, "sport" if k % 2 else "news"), None)])
    finally:
        spool.close()
    return tmp_path


def test_roses_query_prints_the_content_as_a_feed(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = iso8601(T0 + 3 * MINUTE)
    assert main(["query", "-c", str(folder / "feeds.yaml"), "last3", "--at", at]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [i["title"] for i in doc["items"]] == ["sport 3", "news 2", "sport 1"]
    assert doc["title"] == f"last3 at {at}"
    args = ["query", "-c", str(folder / "feeds.yaml"), "topics", "--at", at, "--part", "news"]
    assert main([*args, "--format", "rss"]) == 0
    parsed = feedparser.parse(capsys.readouterr().out)
    assert [e.title for e in parsed.entries] == ["news 2", "news 0"]
    assert main(["query", "-c", str(folder / "feeds.yaml"), "nope"]) == 1
    assert "no stream named 'nope' (streams: last3, topics)" in capsys.readouterr().err


def test_get_streams_answers_with_json_feed_rss_or_atom_and_says_what_is_wrong(
    folder: Path,
) -> None:
    config = load_config(folder / "feeds.yaml")
    store = Store(folder / "store.sqlite")
    app = create_app(
        config, store, lambda: {"ok": True}, pull=PullQueries(config, folder / "data" / "spool")
    )
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        client = httpx.Client(base_url=server.url, timeout=30)
        at = iso8601(T0 + 4 * MINUTE)
        got = client.get("/streams/last3", params={"at": at})
        assert got.status_code == 200
        assert got.headers["content-type"].startswith("application/feed+json")
        assert [i["title"] for i in got.json()["items"]] == ["news 4", "sport 3", "news 2"]
        rss = client.get(
            "/streams/last3", params={"at": at}, headers={"Accept": "application/rss+xml"}
        )
        assert rss.headers["content-type"].startswith("application/rss+xml")
        assert [e.title for e in feedparser.parse(rss.text).entries] == [
            "news 4",
            "sport 3",
            "news 2",
        ]
        atom = client.get("/streams/topics", params={"at": at, "part": "sport", "format": "atom"})
        assert [e.title for e in feedparser.parse(atom.text).entries] == ["sport 3", "sport 1"]
        now = client.get("/streams/last3")  # no time: now, after every item
        assert [i["title"] for i in now.json()["items"]] == ["news 4", "sport 3", "news 2"]
        early = client.get("/streams/last3", params={"at": iso8601(T0 - MINUTE)})
        assert early.status_code == 400 and "before the spool's first event" in early.text
        bad = client.get("/streams/last3", params={"at": "yesterday<b>"})
        assert bad.status_code == 400 and "is not an ISO-8601 time" in bad.text
        assert "yesterday" not in bad.text  # what was asked is not echoed
        missing = client.get("/streams/nope<script>")
        assert missing.status_code == 404 and "no such stream" in missing.text
        assert "nope" not in missing.text
    finally:
        server.stop()
        store.close()


WINDOWS = """
settings: {data_dir: ./data, max_future: 10m}
sources:
  wire: {feed: "file:wire.xml", time: published}
  desk: {feed: "file:desk.xml"}
streams:
  lastten:              # published time: items up to max_future ahead of arrival
    window: {from: wire, time: 10m, every: 5m}
  recent:
    window: {from: {filter: {from: desk, where: "category = 'news'"}}, time: 3m}
  everything:           # not a time window: its whole history up to the time
    filter: {from: {union: [wire, desk]}, where: "true()"}
"""


def test_a_time_window_reads_only_the_spool_its_range_needs(tmp_path: Path) -> None:
    """A pull query of a time window of filters, maps and unions answers as over the
    whole spool, reading the files from its range on (less ``max_future`` over
    publication time): a broken file older than that is never read."""
    (tmp_path / "feeds.yaml").write_text(WINDOWS)
    config = load_config(tmp_path / "feeds.yaml")
    clock = iter(T0 + k * MINUTE for k in range(1000))
    root = tmp_path / "data" / "spool"
    spool = Spool(root, clock=lambda: next(clock), max_future=config.settings.max_future)
    try:
        for k in range(60):
            # arrivals a minute apart (wire's at even minutes), publication times from
            # 20 minutes before to 9 minutes after
            ahead = ((k * 7) % 30 - 20) * MINUTE
            published = T0 + 2 * k * MINUTE + ahead
            spool.append("wire", [(item(k, "sport"), published)])
            spool.append("desk", [(item(100 + k, "news" if k % 3 else "sport"), None)])
    finally:
        spool.close()
    pull = PullQueries(config, root)
    whole = [RefInput(e.source, e.ts, e.seq, e.item, e.published) for e in read_spool(root)]
    settings = config.settings
    for k in (0, 3, 31, 64, 90, 110, 119, 200):
        at = T0 + k * MINUTE + (k % 2) * 7 * MICROS
        for name in ("lastten", "recent", "everything"):
            expected = content_at(
                config.streams[name].stream, whole, at, settings.namespaces, show=iso8601
            )
            got = [(e.ts, e.seq, e.item) for e in pull.answer(name, at).entries]
            assert got == [(e.ts, e.seq, e.item) for e in expected[""]], (name, k)
    # spool files are one append each: break the 80th minute's (wire) after its first
    # line; the windows at 111 min never read it, the whole history does
    broken = sorted(root.rglob("*.jsonl"), key=first_seq)[80]
    broken.write_bytes(broken.read_bytes() + b"not json\n")
    late = T0 + 111 * MINUTE
    assert pull.answer("lastten", late).entries
    assert pull.answer("recent", late).entries
    with pytest.raises(ValueError):
        pull.answer("everything", late)
