"""FeedScheduler: the connector's event loop, its one APScheduler job, parse workers and
batched commits, in real time against real HTTP servers."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from raw_http_support import RawReply, RawServer
from test_connector_support import FeedServer, Reply, rss, until

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.parsepool import ParsePool
from roses_app.connectors.poller import Items, PollResult
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import StateStore
from roses_app.errors import FeedParseError

BODY = rss(("a", "One"), ("b", "Two"))
SETTINGS = FetchSettings(timeout_seconds=3.0)


class Sink:
    """The spool's place: records each batch of polls it is handed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[str]] = []

    def __call__(self, polls: Sequence[tuple[str, Items]]) -> None:
        with self.lock:
            self.batches.append([source for source, _ in polls])

    @property
    def sources(self) -> list[str]:
        with self.lock:
            return [s for batch in self.batches for s in batch]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(tmp_path / "state.sqlite")
    yield s
    s.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    until(predicate, timeout)


def test_first_poll_right_away_then_repeated_and_failures_isolated(
    feed_server: FeedServer, store: StateStore
):
    feed_server.routes["/good"] = Reply(200, BODY)
    feed_server.routes["/bad"] = Reply(500)
    sources = {
        "good": FeedSource("good", feed_server.url("/good"), 0.3),
        "bad": FeedSource("bad", feed_server.url("/bad"), 0.3),
    }
    scheduler = FeedScheduler(store, SETTINGS, sources, Sink())
    started = time.monotonic()
    scheduler.start()
    try:
        wait_for(lambda: len(feed_server.hits("/good")) >= 1 and len(feed_server.hits("/bad")) >= 1)
        assert time.monotonic() - started < 3.0  # no waiting for the first interval
        wait_for(lambda: _oks(store, "good") >= 4)
        wait_for(lambda: _errors(store, "bad") >= 2)
        with pytest.raises(RuntimeError):
            scheduler.start()
    finally:
        scheduler.shutdown(wait=True)
    n_good = len(feed_server.hits("/good"))
    time.sleep(0.5)
    assert len(feed_server.hits("/good")) == n_good  # stopped
    assert not scheduler.running
    state = store.get("bad")
    assert state is not None and state.n_errors >= 2
    good = store.get("good")
    assert good is not None and good.n_ok >= 4 and good.n_errors == 0
    assert scheduler.last_results["bad"][1].status == "error"  # polled at its backoff's end


def test_one_scheduler_job_hands_out_every_source(feed_server: FeedServer, store: StateStore):
    feed_server.routes["/f"] = Reply(200, BODY)
    sources = [FeedSource(f"s{i}", feed_server.url("/f"), 600.0) for i in range(300)]
    sink = Sink()
    # one host: politeness off, or it would take 30 s (4 at a time, 0.1 s apart)
    settings = FetchSettings(timeout_seconds=20.0, per_host=50, host_spacing_seconds=0.0)
    scheduler = FeedScheduler(store, settings, sources, sink)
    scheduler.start()
    try:
        assert scheduler._aps is not None
        (job,) = scheduler._aps.get_jobs()
        assert job.id == "dispatch"
        wait_for(lambda: len(sink.sources) == 300, timeout=60.0)
    finally:
        scheduler.shutdown()
    # polls ending together were committed together: far fewer writes than polls
    assert len(sink.batches) < 100
    assert sorted(sink.sources) == sorted(s.name for s in sources)


def test_poll_all_once_returns_every_source_in_order(
    feed_server: FeedServer, store: StateStore, tmp_path: Path
):
    feed_server.routes["/ok"] = Reply(200, BODY)
    feed_server.routes["/slow"] = Reply(200, BODY, delay=0.5)
    feed_server.routes["/gone"] = Reply(410)
    local = tmp_path / "local.xml"
    local.write_bytes(BODY)
    sources = [
        FeedSource("slow", feed_server.url("/slow"), 60),
        FeedSource("ok", feed_server.url("/ok"), 60),
        FeedSource("gone", feed_server.url("/gone"), 60),
        FeedSource("missing", feed_server.url("/missing"), 60),
        FeedSource("local", local.as_uri(), 60),
    ]
    sink = Sink()
    results = FeedScheduler(store, SETTINGS, sources, sink).poll_all_once()
    assert [r.source for r in results] == ["slow", "ok", "gone", "missing", "local"]
    assert [r.status for r in results] == ["ok", "ok", "gone", "error", "ok"]
    assert sorted(sink.sources) == ["local", "ok", "slow"]


def test_stop_cancels_polls_in_flight_and_writes_nothing_for_them(
    feed_server: FeedServer, store: StateStore
):
    feed_server.routes["/slow"] = Reply(200, BODY, delay=2.5)
    sink = Sink()
    sources = [FeedSource(f"slow{i}", feed_server.url("/slow"), 600) for i in range(20)]
    scheduler = FeedScheduler(store, SETTINGS, sources, sink)
    scheduler.start()
    wait_for(lambda: len(feed_server.hits("/slow")) >= 4)
    started = time.monotonic()
    scheduler.shutdown(wait=True)
    assert time.monotonic() - started < 2.0  # not the 2.5 s the server takes
    assert sink.sources == []
    assert all(store.get(s.name) is None for s in sources)  # no state half-recorded


def test_a_restart_polls_each_source_when_its_stored_state_says(
    feed_server: FeedServer, store: StateStore
):
    feed_server.routes["/old"] = Reply(200, BODY)
    feed_server.routes["/new"] = Reply(200, BODY)
    old = FeedSource("old", feed_server.url("/old"), 600)
    FeedScheduler(store, SETTINGS, [old], Sink()).poll_all_once()
    assert len(feed_server.hits("/old")) == 1
    new = FeedSource("new", feed_server.url("/new"), 600)
    scheduler = FeedScheduler(store, SETTINGS, [old, new], Sink())
    scheduler.start()
    try:
        wait_for(lambda: len(feed_server.hits("/new")) == 1)
        time.sleep(0.5)
        assert len(feed_server.hits("/old")) == 1  # polled a moment ago: due in 10 min
        at = scheduler.queue.due_at("old")
        assert at is not None and at - time.time() > 590
    finally:
        scheduler.shutdown()


def test_late_polls_are_done_late_and_their_lag_counted(feed_server: FeedServer, store: StateStore):
    feed_server.routes["/f"] = Reply(200, BODY, delay=0.4)
    settings = FetchSettings(timeout_seconds=3.0, concurrency=1, per_host=1)
    sources = [FeedSource(f"s{i}", feed_server.url("/f"), 600) for i in range(3)]
    seen: list[PollResult] = []
    scheduler = FeedScheduler(store, settings, sources, Sink(), on_result=seen.append)
    scheduler.start()
    try:
        wait_for(lambda: len(seen) == 3)
    finally:
        scheduler.shutdown()
    lags = sorted(r.lag_seconds for r in seen)
    assert [r.status for r in seen] == ["ok"] * 3
    assert lags[0] < 0.3 and lags[2] >= 0.7  # one at a time: the last waited two fetches


def test_servers_that_never_answer_hold_one_slot_each(
    raw_server: RawServer, feed_server: FeedServer, store: StateStore
):
    raw_server.routes["/hang"] = RawReply(b"HTTP/1.1 200 OK\r\nX-Slow: ", dribble=0.2)
    feed_server.routes["/fast"] = Reply(200, BODY)
    settings = FetchSettings(timeout_seconds=2.0, concurrency=3, per_host=2)
    sources = [FeedSource(f"hang{i}", raw_server.url("/hang"), 0.2) for i in (1, 2)]
    sources += [FeedSource("fast", feed_server.url("/fast"), 0.2)]
    scheduler = FeedScheduler(store, settings, sources, Sink())
    scheduler.start()
    try:
        wait_for(lambda: len(raw_server.connections("/hang")) == 2)
        hanging = time.monotonic()
        wait_for(lambda: len(feed_server.hits("/fast")) >= 4)
        assert time.monotonic() - hanging < 1.8  # while both hang, before their deadline
        assert all(c.closed is None for c in raw_server.connections("/hang"))
        wait_for(lambda: all(_errors(store, f"hang{i}") >= 1 for i in (1, 2)))
    finally:
        scheduler.shutdown()
    state = store.get("hang1")
    assert state is not None and "did not finish within 2 s" in state.last_error


def _errors(store: StateStore, name: str) -> int:
    state = store.get(name)
    return 0 if state is None else state.n_errors


def _oks(store: StateStore, name: str) -> int:
    state = store.get(name)
    return 0 if state is None else state.n_ok


def test_a_failing_result_hook_is_contained(feed_server: FeedServer, store: StateStore):
    feed_server.routes["/ok"] = Reply(200, BODY)
    seen: list[PollResult] = []

    def hook(result: PollResult) -> None:
        seen.append(result)
        raise ValueError("hook bug")

    source = FeedSource("ok", feed_server.url("/ok"), 60)
    scheduler = FeedScheduler(store, SETTINGS, [source], Sink(), on_result=hook)
    (result,) = scheduler.poll_all_once()
    assert result.status == "ok" and seen == [result]


def test_no_sources(store: StateStore):
    scheduler = FeedScheduler(store, SETTINGS, [], Sink())
    assert scheduler.poll_all_once() == []
    scheduler.shutdown()


def test_parsing_runs_in_worker_processes_that_are_replaced_when_they_die():
    import asyncio

    async def scenario() -> tuple[object, BaseException | None, object]:
        pool = ParsePool(1)
        try:
            first = await pool.parse(BODY, "http://example.org/f", {}, ())
            workers = list(pool._pool._processes.values())  # type: ignore[union-attr]
            assert workers and all(p.pid != os.getpid() for p in workers)
            for process in workers:
                os.kill(process.pid, signal.SIGKILL)  # as a crash in a C library would
            failure: BaseException | None = None
            try:
                await pool.parse(BODY, "http://example.org/f", {}, ())
            except FeedParseError as exc:
                failure = exc
            again = await pool.parse(BODY, "http://example.org/f", {}, ("x",))
            return first, failure, again
        finally:
            pool.shutdown()

    first, failure, again = asyncio.run(scenario())
    assert len(first.items) == 2  # type: ignore[attr-defined]
    assert failure is None or "parse worker died" in str(failure)
    assert len(again.items) == 2 and "<category>x</category>" in again.items[0][0]  # type: ignore[attr-defined]


def test_a_parse_cut_short_by_a_stop_is_no_dead_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stop terminates the workers: the parse in flight fails quietly, not as a worker
    that died and is started again."""
    import asyncio

    body = rss(*((f"g{k}", f"item {k}") for k in range(20_000)))

    async def scenario() -> BaseException | None:
        pool = ParsePool(1, max_items=20_000)
        parse = asyncio.ensure_future(pool.parse(body, "http://example.org/f", {}, ()))
        await asyncio.sleep(0.5)  # the worker is parsing
        assert not parse.done()
        pool.shutdown()
        try:
            await parse
        except FeedParseError as exc:
            return exc
        return None

    with caplog.at_level("ERROR"):
        failure = asyncio.run(scenario())
    assert failure is not None and "the daemon is stopping" in str(failure)
    assert "parse worker died" not in caplog.text


def test_a_large_document_reaches_the_worker_through_a_file_then_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over parsepool.SPILL_BYTES a document is written to the spill folder and read there
    by the worker (not pickled whole); the file is gone after, and files a killed daemon
    left are removed when the pool starts."""
    import asyncio

    from roses_app.connectors import parsepool, poller

    spill = tmp_path / "parse"
    spill.mkdir()
    (spill / "parse-left-by-a-kill.xml").write_bytes(BODY)
    monkeypatch.setattr(parsepool, "SPILL_BYTES", 10)
    seen: list[str] = []

    def spilled(path: str, *args: Any) -> poller.Parsed:
        seen.append(Path(path).read_text(encoding="utf-8"))
        return poller.parse_document_file(path, *args)

    monkeypatch.setattr(parsepool, "parse_document_file", spilled)

    async def scenario() -> poller.Parsed:
        pool = ParsePool(1, spill_dir=spill)
        assert list(spill.iterdir()) == []  # the stale one is gone
        pool._pool.shutdown()  # in line instead: the worker would not see the patch
        pool._pool = concurrent.futures.ThreadPoolExecutor(1)  # type: ignore[assignment]
        try:
            return await pool.parse(BODY, "http://example.org/f", {}, ("x",))
        finally:
            pool._pool.shutdown()

    parsed = asyncio.run(scenario())
    assert seen == [BODY.decode()] and list(spill.iterdir()) == []
    assert parsed == poller.parse_document(BODY, "http://example.org/f", {}, ("x",))


KILLED_DAEMON = """
import asyncio, os, sys
from roses_app.connectors.parsepool import ParsePool
BODY = sys.stdin.buffer.read()

async def main():
    pool = ParsePool(1)
    await pool.parse(BODY, "http://example.org/f", {}, ())
    workers = [p.pid for p in pool._pool._processes.values()]
    print(os.getpid(), *workers, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def test_parse_workers_and_their_fork_server_end_with_a_killed_daemon():
    """kill -9 of the daemon: its parse worker and the fork server do not linger."""
    import subprocess
    import sys
    import time

    daemon = subprocess.Popen([sys.executable, "-c", KILLED_DAEMON], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)  # fmt: skip
    assert daemon.stdin is not None and daemon.stdout is not None
    daemon.stdin.write(BODY)
    daemon.stdin.close()
    pid, *workers = map(int, daemon.stdout.readline().split())
    server = int(Path(f"/proc/{workers[0]}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert workers and server not in (pid, 1)  # the worker's parent: the fork server
    daemon.kill()
    daemon.wait(10)

    def gone(p: int) -> bool:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except FileNotFoundError:
            return True
        return stat.rsplit(")", 1)[1].split()[0] == "Z"  # ended, not reaped yet

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(map(gone, [*workers, server])):
        time.sleep(0.1)
    assert all(map(gone, [*workers, server])), "a parse worker or the fork server lingers"


def test_polls_spaced_on_one_host_all_start_without_a_stall(
    feed_server: FeedServer, store: StateStore, caplog: pytest.LogCaptureFixture
):
    """Many sources of one host, started 2 ms apart, one fetch at a time: the dispatch
    job is moved to each next start again and again, often to a moment already past
    by then; no start is skipped, and a host's slot is free once its fetch ends (its
    document is parsed and written meanwhile)."""
    feed_server.routes["/f"] = Reply(200, BODY)
    settings = FetchSettings(timeout_seconds=3.0, per_host=1, host_spacing_seconds=0.002)
    sources = [FeedSource(f"s{i}", feed_server.url("/f"), 600.0) for i in range(100)]
    sink = Sink()
    scheduler = FeedScheduler(store, settings, sources, sink)
    scheduler.start()
    started = time.monotonic()
    try:
        wait_for(lambda: len(sink.sources) == 100, timeout=30.0)  # a stall lasts 60 s
        took = time.monotonic() - started
    finally:
        scheduler.shutdown()
    assert "skipped" not in caplog.text and "missed" not in caplog.text
    assert took < 15.0, took


def test_the_dispatch_job_moved_to_a_past_moment_still_runs(
    feed_server: FeedServer, store: StateStore, caplog: pytest.LogCaptureFixture
):
    """The dispatch job moves itself to the next start while it runs; when that moment
    is already past (a busy loop), APScheduler runs it again at once, while the running
    instance is still counted: that run must not be skipped (a stall of 60 s)."""
    feed_server.routes["/f"] = Reply(200, BODY)
    settings = FetchSettings(timeout_seconds=3.0, per_host=1, host_spacing_seconds=0.3)
    sources = [FeedSource(f"s{i}", feed_server.url("/f"), 600.0) for i in range(4)]
    sink = Sink()
    scheduler = FeedScheduler(store, settings, sources, sink)
    real, late = scheduler.queue.next_wakeup, [2]

    def next_wakeup() -> float | None:  # the first two answers come too late to be kept
        wake = real()
        if wake is None or late[0] == 0:
            return wake
        late[0] -= 1
        return time.time() - 0.001

    scheduler.queue.next_wakeup = next_wakeup  # type: ignore[method-assign]
    scheduler.start()
    try:
        wait_for(lambda: len(sink.sources) == 4, timeout=10.0)
    finally:
        scheduler.shutdown()
    assert "skipped" not in caplog.text


def test_polls_whose_items_wait_for_the_pace_do_not_hold_the_fetch_slots(
    feed_server: FeedServer, store: StateStore
):
    """Two polls in flight at most, appends 5 s apart: the ten sources are all fetched
    while the appends wait (a poll holding its place until its append would let two
    through every 5 s), and their items all come in one or two appends."""
    for i in range(10):
        feed_server.routes[f"/f{i}"] = Reply(200, rss((f"g{i}", f"Item {i}")))
    sources = [FeedSource(f"s{i}", feed_server.url(f"/f{i}"), 600.0) for i in range(10)]
    sink = Sink()
    settings = FetchSettings(
        timeout_seconds=5.0, concurrency=2, per_host=2, host_spacing_seconds=0.0
    )
    scheduler = FeedScheduler(store, settings, sources, sink, append_every=5.0)
    scheduler.start()
    try:
        wait_for(lambda: sum(len(feed_server.hits(f"/f{i}")) for i in range(10)) == 10, 4.0)
        assert len(sink.batches) <= 1  # the rest wait for the pace
        wait_for(lambda: len(sink.sources) == 10, timeout=15.0)
    finally:
        scheduler.shutdown()
    assert len(sink.batches) <= 2
    assert sorted(sink.sources) == sorted(s.name for s in sources)
