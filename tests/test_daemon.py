"""The daemon's own logic: query restarts, heartbeats, the data folder lock (no Spark)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from roses_app.config import parse_config
from roses_app.daemon import Daemon
from roses_app.errors import DataDirInUseError
from roses_app.spark.queries import RunningQuery

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


def test_heartbeats_only_while_time_can_change_a_result(tmp_path: Path) -> None:
    """A heartbeat once the stream's interval has passed since the last event, none
    once the last item is past every window (see roses_app.algebra.planner.heartbeats); a
    config of stateless streams needs none."""
    stateless = CONFIG.replace(
        'aggregate: {from: {window: {from: a, time: 1h, every: 1h}}, reduce: "<item/>"}',
        "filter: {from: a, where: title}",
    )
    plain = Daemon(parse_config(stateless, tmp_path / "plain" / "feeds.yaml"))
    assert plain.beats is None
    plain.close()
    now = [1_000_000_000_000]
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    assert daemon.beats is not None
    daemon.spool._clock = lambda: now[0]
    daemon.spool.append("a", [("<item><title>x</title></item>", None)])
    daemon._heartbeat(daemon.beats)
    assert [e.item is None for e in daemon.spool.events()] == [False]  # an item just came
    now[0] += daemon.beats.interval
    daemon._heartbeat(daemon.beats)
    assert [e.item is None for e in daemon.spool.events()] == [False, True]
    # a long quiet spell: one heartbeat closes whatever was left, then none
    now[0] += 100 * daemon.beats.interval + daemon.beats.horizon
    for _ in range(3):
        daemon._heartbeat(daemon.beats)
        now[0] += daemon.beats.interval
    assert [e.item is None for e in daemon.spool.events()] == [False, True, True]
    daemon.close()


def test_once_heartbeats_now_until_time_can_no_longer_change_a_result(tmp_path: Path) -> None:
    """`once` closes what has ended by now with a heartbeat, even right after an item
    (unlike the daemon, it runs no later to do it); once a heartbeat past the last
    item's horizon is in the spool, it writes none: each costs every query a batch."""
    now = [1_000_000_000_000]
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    assert daemon.beats is not None
    daemon.spool._clock = lambda: now[0]
    daemon._close_ended(daemon.beats)
    assert list(daemon.spool.events()) == []  # nothing to close in an empty spool
    daemon.spool.append("a", [("<item><title>x</title></item>", None)])
    now[0] += 1
    daemon._close_ended(daemon.beats)
    assert [e.item is None for e in daemon.spool.events()] == [False, True]
    now[0] += daemon.beats.horizon // 2
    daemon._close_ended(daemon.beats)  # a window may have ended since
    assert [e.item is None for e in daemon.spool.events()] == [False, True, True]
    now[0] += daemon.beats.horizon + daemon.beats.interval
    for _ in range(3):  # the first passes the horizon; after it, none
        daemon._close_ended(daemon.beats)
        now[0] += daemon.beats.interval
    assert [e.item is None for e in daemon.spool.events()] == [False, True, True, True]
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
        return RunningQuery(name, frozenset(streams), FakeQuery(active), lambda: FakeQuery(True))  # type: ignore[arg-type, return-value]

    daemon.queries = [running("stateless", {"plain"}, True), running("gen-1", {"hourly"}, True)]
    assert not daemon.health()["ok"]  # the loop has not looked at the queries yet
    daemon._look_at_queries()  # what the daemon's loop does every second
    health = daemon.health()
    assert health["ok"] and set(health["queries"]) == {"stateless", "gen-1"}
    assert health["streams"]["plain"] == {"running": True, "published": False}
    daemon.store.write_batch(
        "stateless", 0, [OutRow("plain", "", 1, 1, "<item><guid>g</guid></item>")]
    )
    assert daemon.health()["streams"]["plain"] == {"running": True, "published": True}
    daemon.queries = [running("stateless", {"plain"}, True), running("gen-1", {"hourly"}, False)]
    daemon._look_at_queries()
    health = daemon.health()
    assert not health["ok"] and health["streams"]["hourly"]["running"] is False
    daemon.queries = [running("stateless", {"plain"}, True)]
    daemon._look_at_queries()
    assert not daemon.health()["ok"]  # the stateful query is not there yet
    # /healthz answers from that look: a JVM slow to answer py4j never delays a probe
    daemon.queries = [RunningQuery("q", frozenset({"plain"}), Unreachable(), Unreachable)]  # type: ignore[arg-type, return-value]
    assert set(daemon.health()["queries"]) == {"stateless"}
    daemon.close()


class Unreachable:
    """A query whose every py4j call fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"/healthz called the JVM ({name})")


def test_health_counts_streams_above_the_detail_limit(tmp_path: Path, monkeypatch) -> None:
    """100,000 subscriptions: /healthz says how many streams run, not each one."""
    import roses_app.daemon_status as daemon_status

    monkeypatch.setattr(daemon_status, "STREAM_DETAIL_LIMIT", 1)
    daemon = Daemon(parse_config(TWO, tmp_path / "feeds.yaml"))
    fake = FakeQuery(True)
    daemon.queries = [RunningQuery("stateless", frozenset({"plain"}), fake, lambda: fake)]  # type: ignore[arg-type, return-value]
    daemon._look_at_queries()
    health = daemon.health()
    assert not health["ok"]
    assert health["streams"] == {
        "total": 2, "running": 1, "published": 0, "not_running": ["hourly"]
    }  # fmt: skip
    daemon.close()


def test_a_second_daemon_on_the_data_folder_is_refused_and_told_who_holds_it(
    tmp_path: Path,
) -> None:
    config = parse_config(CONFIG, tmp_path / "feeds.yaml")
    first = Daemon(config)
    with pytest.raises(DataDirInUseError) as refused:
        Daemon(config)
    message = str(refused.value)
    assert f"data folder {tmp_path / 'data'} is in use by ROSES PID {os.getpid()}" in message
    assert "stop it first" in message
    first.close()
    Daemon(config).close()  # released on close


HOLDER = """
import sys, time
from pathlib import Path
from roses_app.datalock import DataDirLock
DataDirLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def test_the_lock_dies_with_its_process_even_on_kill_9(tmp_path: Path) -> None:
    config = parse_config(CONFIG, tmp_path / "feeds.yaml")
    data = tmp_path / "data"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(DataDirInUseError, match=f"PID {holder.pid} "):
            Daemon(config)
    finally:
        holder.kill()  # SIGKILL: no clean-up runs in the holder
        holder.wait()
    Daemon(config).close()


@dataclass
class StoppableQuery(FakeQuery):
    stopped: bool = False

    def stop(self) -> None:
        self.stopped, self.isActive = True, False


def test_a_grown_stateless_checkpoint_is_rebased_at_compaction_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop the stateless query, archive what it read, start afresh, start it again."""
    import json

    from roses_app.spark import fresh_checkpoint as rebase

    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    read = daemon.spool.log_dir / "00000000000000000001-x.jsonl"
    read.write_text("")
    checkpoint = tmp_path / "data" / "checkpoints" / "stateless"
    for folder in ("offsets", "commits", "sources/0"):
        (checkpoint / folder).mkdir(parents=True)
        entry = json.dumps({"path": read.as_uri(), "timestamp": 1, "batchId": 0})
        (checkpoint / folder / "0").write_text(f"v1\n{entry}")
    started: list[StoppableQuery] = []

    def restart() -> StoppableQuery:
        started.append(StoppableQuery(True))
        return started[-1]

    first = StoppableQuery(True)
    daemon.queries = [RunningQuery("stateless", frozenset(), first, restart)]  # type: ignore[arg-type]
    daemon._rebase_stateless()  # 2 MB of log before it is due: nothing happens
    assert not first.stopped and read.exists()
    monkeypatch.setattr(rebase, "REBASE_LOG_BYTES", 0)
    daemon._rebase_stateless()
    assert first.stopped and daemon.queries[0].query is started[0]
    assert not read.exists() and list(daemon.spool.archive_dir.rglob(read.name))
    assert rebase.read_epoch(checkpoint) == 1 and daemon.counters["stateless_rebases"] == 1
    daemon.close()


def test_sources_are_polled_while_the_engine_starts(tmp_path: Path) -> None:
    """Starting Spark takes seconds: the sources are polled meanwhile, so the first
    micro-batch has the first items (not the trigger after it)."""
    import socket
    import threading

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "a.xml").write_text(
        "<rss version='2.0'><channel><title>a</title>"
        "<item><title>first</title><guid>g1</guid></item></channel></rss>"
    )
    config = CONFIG.replace(
        "settings: {data_dir: ./data}",
        f"settings: {{data_dir: ./data, http: {{host: 127.0.0.1, port: {port}}}}}",
    )
    stop = threading.Event()
    spooled_at_start: list[int] = []

    class Engineless(Daemon):
        def start_queries(self, once: bool) -> list[object]:
            # the engine's start: as long as Spark's, or until the poll has landed
            deadline = time.monotonic() + 30
            while self.spool.count() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            spooled_at_start.append(self.spool.count())
            stop.set()
            return []

    daemon = Engineless(parse_config(config, tmp_path / "feeds.yaml"))
    runner = threading.Thread(target=daemon.run, args=(stop,))
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    assert spooled_at_start == [1]


class _SparkAsked(Exception):
    """Raised by the stand-in for build_session: what it was asked is all we need."""


@pytest.mark.parametrize("once", [True, False])
def test_once_starts_a_jvm_for_a_finite_run_and_run_one_for_a_long_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, once: bool
) -> None:
    import roses_app.spark.session as session

    asked: list[bool] = []

    def build_session(*args: object, finite: bool = False, **kwargs: object) -> None:
        asked.append(finite)
        raise _SparkAsked

    monkeypatch.setattr(session, "build_session", build_session)
    daemon = Daemon(parse_config(CONFIG, tmp_path / "feeds.yaml"))
    try:
        with pytest.raises(_SparkAsked):
            daemon.start_queries(once=once)
    finally:
        daemon.close()
    # roses once: C1 only (its run ends before C2's code pays back); roses run: tiered
    assert asked == [once]
