"""The `roses` command: check, explain, once (cron mode) and replay."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import feedparser
import pytest

from roses_app.cli import EXIT_FAILED, build_parser, cmd_run, main, reload_on_hangup
from roses_app.config.durations import parse_duration
from roses_app.daemon import STOP_BATCH_SECONDS
from roses_app.spark.session import JVM_EXIT_SECONDS

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_check_accepts_the_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-c", str(REPO / "feeds.yaml")]) == 0
    assert "OK (5 sources, 7 streams)" in capsys.readouterr().out


def test_check_reports_every_mistake_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    bad = DATA / "config" / "bad_many.yaml"
    assert main(["check", "-c", str(bad)]) == 2
    err = capsys.readouterr().err
    expected = [
        line.split(":", 1)[0] for line in (bad.with_suffix(".expected")).read_text().splitlines()
    ]
    for line in expected:
        assert f"{bad}:{line}:" in err
    assert "nothing was started" in err


def test_explain_prints_the_plan_with_its_lines(capsys: pytest.CaptureFixture[str]) -> None:
    config = DATA / "replay" / "spine" / "feeds.yaml"
    assert main(["explain", "--logical-only", "-c", str(config), "titles"]) == 0
    out = capsys.readouterr().out
    assert "Map μ xpath 'title'" in out
    assert f"Union ∪ of 2  [{config}:8]  (shared by titles, volcano: computed once)" in out
    assert "== stream titles: rewritten plan: unchanged (no rule applies)" in out
    assert main(["explain", "--logical-only", "-c", str(config), "nope"]) == 2


EXPLAINED = """
sources:
  a: {feed: "file:a.xml"}
  b: {feed: "file:b.xml"}
streams:
  both:
    union:
      - filter: {from: a, where: "category = 'sport'"}
      - b
  sporty:
    filter:
      from: {filter: {from: a, where: "category = 'sport'"}}
      where: "not(category = 'world')"
  worldly:
    filter:
      from: {filter: {from: b, where: "category = 'world'"}}
      where: "not(category = 'sport')"
  recent:
    semijoin:
      left: a
      right: {window: {from: b, time: 2h, delay: 10m}}
      on: "$i1/category = $i2/category"
  fresh:
    diff: {left: a, right: {window: {from: b, time: 1d}}, on: "$i1/title = $i2/title"}
  joined:
    join: {left: a, right: {window: {from: b, time: 1h}}, on: "$i1/link = $i2/link", kind: left}
  last3:
    window: {from: a, count: 3}
  counts:
    group:
      from: {window: {from: a, time: 1d, every: 1d}}
      by: "string(category)"
      reduce: "<item>{ count($items) }</item>"
  grouped:
    grouping: {from: a, by: "string(category)", window: 2, reduce: "<item>{ count($items) }</item>"}
  nested:
    unnest: {from: {nest: {from: a}}}
  gone:
    delta: {from: a, kind: delete}
"""


def explain_logical(tmp_path: Path, capsys: pytest.CaptureFixture[str], *streams: str) -> str:
    config = tmp_path / "feeds.yaml"
    config.write_text(EXPLAINED)
    assert main(["explain", "--logical-only", "-c", str(config), *streams]) == 0
    return capsys.readouterr().out


def test_explain_summarizes_by_default_and_prints_every_plan_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = explain_logical(tmp_path, capsys)
    config = tmp_path / "feeds.yaml"
    assert out.splitlines()[:4] == [
        "== 11 streams over 2 sources: 3 stateless (one fused stage), 8 stateful; 0 published",
        "== the plans as written: 34 operators and source reads (Source 15, Window 5, "
        "Filter 5, Delta 1, Unnest 1, Nest 1, WindowedGrouping 1, GroupBy 1, Join 1, Diff 1, "
        "Semijoin 1, Union 1)",
        "== rewritten: 1 stream changed (fuse_selections ×1)",
        "== the global plan: 19 nodes (equal sub-plans are one node), 3 shared by several "
        "streams (each computed once): Window 5, Filter 3, Source 2, Union 1, Semijoin 1, "
        "Diff 1, Join 1, GroupBy 1, WindowedGrouping 1, Nest 1, Unnest 1, Delta 1",
    ]
    assert f"""Filter σ where "category = 'sport'" [{config}:8]: 2 streams""" in out
    assert f"   stream both: 4 [{config}:7]" in out
    assert "== stream" not in out  # no stream's plan in full
    everything = explain_logical(tmp_path, capsys, "--all")
    for name in ("both", "sporty", "worldly", "recent", "fresh", "gone"):
        assert f"== stream {name}: logical plan" in everything


def test_explain_describes_every_operator_of_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = explain_logical(tmp_path, capsys, "--all")
    for line in (
        "Semijoin ⋉ on '$i1/category = $i2/category'",
        "  Window ω_time w=2h d=10m",
        "Diff − on '$i1/title = $i2/title'",
        "Join ⋈ left on '$i1/link = $i2/link', combine built-in composition",
        "Window ω_count N=3",
        "GroupBy γ by 'string(category)' reduce inline XQuery '<item>{ count($items) }</item>'",
        "  Window ω_time w=1d f=1d t0=0s",
        "WindowedGrouping by 'string(category)' last 2 reduce inline XQuery",
        "Unnest",
        "  Nest",
        "Delta δ⁻ delete",
    ):
        assert line in out, line


def test_explain_shows_the_rewritten_plan_and_shared_subplans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = explain_logical(tmp_path, capsys, "both", "sporty", "worldly")
    parts = (part.partition("\n") for part in out.split("== stream ")[1:])
    sections = {head: body for head, _, body in parts}
    # σ(a) is in two streams: computed once (the reference's memo, one node of the global plan) ...
    shared = "(shared by both, sporty: computed once)"
    written = sections["sporty: logical plan"]
    assert f"Filter σ where \"category = 'sport'\"  [{tmp_path}/feeds.yaml:12]  {shared}" in written
    # ... so the rewriter does not fuse the selection above it into it
    assert "sporty: rewritten plan: unchanged (no rule applies)" in sections
    fused = sections["worldly: rewritten plan (rules: fuse_selections)"]
    assert "Filter σ where \"(category = 'world') and (not(category = 'sport'))\"" in fused


def test_explain_says_how_often_spark_runs_a_shared_stateful_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "feeds.yaml"
    config.write_text(
        "sources:\n  src: {feed: 'file:feed.xml'}\nstreams:\n"
        "  changes: {delta: {from: src}}\n"
        "  pairs: {semijoin: {left: changes, right: changes, on: 'true()'}}\n"
        "  titles: {map: {from: changes, xpath: title}}\n"
    )
    assert main(["explain", "--logical-only", "-c", str(config), "titles", "pairs"]) == 0
    out = capsys.readouterr().out
    # read by the map (a stateless tail) and the stream itself: one copy for both; the
    # semijoin reads it at both sides, and Spark gives each side its own copy
    assert "(shared by changes, pairs, titles: the reference computes it once, Spark 3×)" in out


def test_replay_cli_writes_the_reference_outputs(tmp_path: Path) -> None:
    fixture = DATA / "replay" / "spine"
    args = ["replay", "-c", str(fixture / "feeds.yaml"), "--events", str(fixture / "events.jsonl")]
    assert main([*args, "--out", str(tmp_path), "--engine", "reference"]) == 0
    got = [
        json.loads(line)["ts"]
        for line in (tmp_path / "topics" / "sport.jsonl").read_text().splitlines()
    ]
    assert got == [2, 4]


@pytest.mark.parametrize("engine", ["reference", "spark"])
def test_replay_of_an_events_file_that_cannot_be_read_says_so_before_starting_spark(
    tmp_path: Path,
    engine: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import roses_app.spark.session

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark started for an events file that cannot be read")

    monkeypatch.setattr(roses_app.spark.session, "build_session", no_spark)
    fixture = DATA / "replay" / "spine"
    missing = tmp_path / "nowhere.jsonl"
    args = ["replay", "-c", str(fixture / "feeds.yaml"), "--events", str(missing)]
    assert main([*args, "--out", str(tmp_path / "out"), "--engine", engine]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert f"roses: {missing}: cannot read the events file (No such file or directory)" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_once_processes_good_sources_and_survives_bad_ones(
    tmp_path: Path, spark: object, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(REPO / "examples" / "feeds" / "bigpicture.xml", tmp_path / "good.xml")
    (tmp_path / "broken.xml").write_text("this is not a feed <<<")
    (tmp_path / "feeds.yaml").write_text(
        f"""
settings: {{data_dir: ./data}}
sources:
  good:   {{feed: "file:good.xml"}}
  broken: {{feed: "file:broken.xml"}}
  down:   {{feed: "http://127.0.0.1:{closed_port()}/feed.xml"}}
streams:
  volcano:
    filter: {{from: good, where: "category = 'volcano'"}}
    publish: {{title: "Volcano"}}
  all:
    union: [good, broken, down]
    publish: true
"""
    )
    assert main(["once", "-c", str(tmp_path / "feeds.yaml")]) == 0
    summary = capsys.readouterr().out
    assert "sources=3 failed_sources=2" in summary
    public = tmp_path / "data" / "public"
    volcano = feedparser.parse((public / "feeds" / "volcano.rss").read_bytes())
    assert len(volcano.entries) == 6 and not volcano.bozo  # 6 items are tagged volcano
    everything = feedparser.parse((public / "feeds" / "all.atom").read_bytes())
    assert len(everything.entries) == 8
    assert "volcano.rss" in (public / "feeds.opml").read_text()
    # A second run finds nothing new and changes nothing.
    before = (public / "feeds" / "all.atom").read_bytes()
    assert main(["once", "-c", str(tmp_path / "feeds.yaml"), "--strict"]) == 1
    second = capsys.readouterr().out
    assert "failed_sources=0 sources_in_backoff=2 items_spooled=0" in second
    assert (public / "feeds" / "all.atom").read_bytes() == before


@pytest.mark.spark
def test_explain_prints_sparks_plans(
    tmp_path: Path, spark: object, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = DATA / "replay" / "spine"
    config = tmp_path / "feeds.yaml"
    config.write_text((fixture / "feeds.yaml").read_text().replace("./data", str(tmp_path)))
    assert main(["explain", "-c", str(config), "titles"]) == 0
    out = capsys.readouterr().out
    assert "== the global plan (the nodes of these streams; equal sub-plans are one node)" in out
    # the union of the two filters is one node, shared by two streams
    assert "streams: titles, volcano; query: stateless (fused stage)" in out
    assert "streams: topics;" not in out  # a node titles does not use
    assert "== Spark query stateless: its plan" in out
    physical = out.split("== Physical Plan ==")[1]
    # Every function of every stream runs in one fused Arrow stage, once per item.
    assert physical.count("MapInArrow") == 1 and "ArrowEvalPython" not in physical


@pytest.mark.spark
def test_items_failing_a_function_are_dropped_and_counted_per_step(
    tmp_path: Path, spark: object
) -> None:
    from roses_app.config import load_config
    from roses_app.daemon import Daemon

    (tmp_path / "feed.xml").write_text(
        "<rss version='2.0'><channel><title>n</title><link>http://example.org/</link>"
        + "".join(
            f"<item><title>{t}</title><guid isPermaLink='false'>{t}</guid></item>"
            for t in ("1", "2", "three", "4")
        )
        + "</channel></rss>"
    )
    (tmp_path / "feeds.yaml").write_text(
        """
settings: {data_dir: ./data}
sources:
  numbers: {feed: "file:feed.xml"}
streams:
  big:
    filter: {from: numbers, where: "xs:integer(title) > 1"}
    publish: true
"""
    )
    daemon = Daemon(load_config(tmp_path / "feeds.yaml"))
    try:
        daemon.once()
        published = {e.guid for e in daemon.store.latest("big", "", 10)}
        assert published == {"2", "4"}  # "three" failed the cast: dropped, not fatal
        assert daemon.errors.value == {"big/filter": 1}
    finally:
        daemon.close()


@pytest.mark.spark
def test_once_publishes_one_item_per_closed_group_with_its_window_guid(
    tmp_path: Path, spark: object, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(REPO / "examples" / "feeds" / "bigpicture.xml", tmp_path / "photos.xml")
    (tmp_path / "feeds.yaml").write_text(
        f"""
settings: {{data_dir: ./data}}
sources:
  photos: {{feed: "file:photos.xml"}}
streams:
  by-category:
    group: {{from: photos, by: "string(category[1])", reduce: {REPO / "xquery" / "digest.xq"}}}
    publish: {{title: "Photos by category"}}
"""
    )
    config = tmp_path / "feeds.yaml"
    assert main(["once", "-c", str(config)]) == 0
    time.sleep(0.01)  # the next run's heartbeat comes in a later millisecond
    assert main(["once", "-c", str(config)]) == 0  # its heartbeat closes the groups
    capsys.readouterr()
    feed = feedparser.parse(
        (tmp_path / "data" / "public" / "feeds" / "by-category.rss").read_bytes()
    )
    categories = {
        c
        for item in ET.parse(tmp_path / "photos.xml").iter("item")
        for c in [item.findtext("category")]
    }
    assert not feed.bozo and len(feed.entries) == len(categories)
    for entry in feed.entries:
        assert entry.id.startswith("roses:by-category/")  # stream / window bounds / key
        key = entry.id.rsplit("/", 1)[1]
        assert key in categories and entry.title.startswith(f"Digest of {key}: ")
    # a third run: the same groups, the same guids, nothing added
    time.sleep(0.01)
    assert main(["once", "-c", str(config)]) == 0
    again = feedparser.parse(
        (tmp_path / "data" / "public" / "feeds" / "by-category.rss").read_bytes()
    )
    assert sorted(e.id for e in again.entries) == sorted(e.id for e in feed.entries)


def test_help_is_plain_text() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "roses_app.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stderr == ""
    assert "continuous query engine for RSS/Atom feeds" in done.stdout
    assert not any(mark in done.stdout for mark in ("``", ":func:", ":mod:", "**"))


def test_the_systemd_unit_runs_the_daemon_and_stops_it_with_sigterm() -> None:
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys keep their case
    unit.read(REPO / "examples" / "roses.service", encoding="utf-8")
    service = unit["Service"]
    assert service["Type"] == "simple"
    assert (service["Restart"], service["KillSignal"]) == ("on-failure", "SIGTERM")
    # SIGTERM to roses alone: Spark's JVM, killed with it, would abandon the batch
    assert service["KillMode"] == "mixed"
    assert parse_duration(service["TimeoutStopSec"]) > STOP_BATCH_SECONDS + JVM_EXIT_SECONDS
    argv = shlex.split(service["ExecStart"])
    assert Path(argv[0]).name == "roses"
    args = build_parser().parse_args(argv[1:])
    assert (args.func, args.config) == (cmd_run, "/etc/roses/feeds.yaml")
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    # `systemctl reload roses`: SIGHUP, on which roses reads feeds.yaml again
    assert shlex.split(service["ExecReload"]) == ["/bin/kill", "-HUP", "$MAINPID"]


def test_sighup_asks_for_a_reload_and_nothing_more() -> None:
    asked = threading.Event()
    previous = signal.getsignal(signal.SIGHUP)
    try:
        reload_on_hangup(asked)
        os.kill(os.getpid(), signal.SIGHUP)
        assert asked.wait(5)  # the process lives on: the daemon's loop does the reload
    finally:
        signal.signal(signal.SIGHUP, previous)
