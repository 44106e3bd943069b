"""The daemon's own logic: query restarts and heartbeats (no Spark needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from roses_app.algebra.plan import Filter, Source, Stream, TimeWindow, Window
from roses_app.config import parse_config
from roses_app.daemon import Daemon, needs_time
from roses_app.spark.runner import RunningQuery

CONFIG = """
settings: {data_dir: ./data}
sources:
  a: {feed: "file:a.xml"}
streams:
  hourly:
    aggregate: {from: {window: {from: a, time: 1h, every: 1h}}, reduce: "<item/>"}
"""


@dataclass
class FakeQuery:
    isActive: bool  # the name StreamingQuery has
    failure: str = "boom"
    status: dict[str, object] = field(default_factory=dict)

    def exception(self) -> str:
        return self.failure


def test_a_dead_query_is_started_again_from_its_own_closure(tmp_path: Path) -> None:
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    started: list[FakeQuery] = []

    def restart() -> FakeQuery:
        started.append(FakeQuery(True))
        return started[-1]

    running = RunningQuery("gen-0", frozenset({"hourly"}), FakeQuery(False), restart)  # type: ignore[arg-type]
    daemon.queries = [running]
    daemon._check_queries()
    assert running.query is started[0] and daemon.counters["query_restarts"] == 1
    running.query = FakeQuery(False)
    daemon._check_queries()  # failing again at once: it waits (backoff)
    assert len(started) == 1
    daemon.close()


def test_heartbeats_only_when_time_matters_and_nothing_arrived(tmp_path: Path) -> None:
    assert not needs_time([Stream("s", Filter(Source("a"), "true()"))])
    assert needs_time([Stream("s", Window(Source("a"), TimeWindow(5)))])
    now = [1_000_000_000_000]
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    daemon.spool._clock = lambda: now[0]
    daemon.spool.append("a", [("<item><title>x</title></item>", None)])
    daemon._heartbeat()
    assert [e.item is None for e in daemon.spool.events()] == [False]  # an item just came
    now[0] += 31_000_000
    daemon._heartbeat()
    assert [e.item is None for e in daemon.spool.events()] == [False, True]
    daemon.close()


TWO = """
settings: {data_dir: ./data}
sources:
  a: {feed: "file:a.xml"}
streams:
  plain: {filter: {from: a, where: "true()"}}
  hourly:
    aggregate: {from: {window: {from: a, time: 1h, every: 1h}}, reduce: "<item/>"}
"""


def test_health_tells_running_from_published_per_stream(tmp_path: Path) -> None:
    from roses_app.store import OutRow

    daemon = Daemon(parse_config(TWO, tmp_path / "feeds.yaml"))

    def running(name: str, streams: set[str], active: bool) -> RunningQuery:
        return RunningQuery(name, frozenset(streams), FakeQuery(active), lambda: FakeQuery(True))  # type: ignore[arg-type]

    daemon.queries = [running("stateless", {"plain"}, True), running("gen-1", {"hourly"}, True)]
    health = daemon.health()
    assert health["ok"] and set(health["queries"]) == {"stateless", "gen-1"}
    assert health["streams"]["plain"] == {"running": True, "published": False}
    daemon.store.write_batch(
        "stateless", 0, [OutRow("plain", "", 1, 1, "<item><guid>g</guid></item>")]
    )
    assert daemon.health()["streams"]["plain"] == {"running": True, "published": True}
    daemon.queries = [running("stateless", {"plain"}, True), running("gen-1", {"hourly"}, False)]
    health = daemon.health()
    assert not health["ok"] and health["streams"]["hourly"]["running"] is False
    daemon.queries = [running("stateless", {"plain"}, True)]
    assert not daemon.health()["ok"]  # the stateful query is not there yet
    daemon.close()
