"""A daemon's life: stopping on a signal to its process group, one process per data
folder, a readable log, and kill -9 at random points without losing or repeating an item.

`roses run` is started as a shell starts a job, in a process group of its own, which
the tests signal as a terminal's Ctrl-C (SIGINT) and systemd or `kill -TERM -PGID`
(SIGTERM) do.  Where a micro-batch is, is read from outside: Spark's checkpoint
(`offsets/N` is written before batch N runs, `commits/N` after) and the store's
`batches` table (written by the batch, in the transaction of its rows).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from lxml import etree
from test_connector_support import FeedServer, conditional, rss
from test_e2e import Roses, Site, free_port, wait_for

from roses_app.spool import Spool
from roses_app.store import KEEP_BATCHES

pytestmark = pytest.mark.e2e

CONFIG = """
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: {trigger}}}
  fetch: {{per_host: 32, host_spacing: 0s}}   # every feed of the test is on one host
sources:
  news: {{feed: "{feed}", every: 1s}}
{sources}streams:
  everything:
    filter: {{from: news, where: "not(starts-with(title, 'never'))"}}
    publish: {{title: "Everything", keep: {{count: 100000}}}}
{more}"""
# a stateful stream: a second query, with Spark's start-up and no-data batch warnings
HOURLY = """  hourly:
    aggregate:
      from: {window: {from: news, time: 1h, every: 1h}}
      reduce: "<item><title>{count($items)} items</title></item>"
"""
FEED = "/feeds/everything.rss"
STATELESS = "stateless"  # the query that writes the stream (runner.STATELESS_QUERY)
# a log record as roses_app.cli formats it, or a Spark one (log4j2.properties)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+: ")
NOISE = ("Traceback", "Exception", "WARNING: Using incubator modules", "falling behind")


class Job(Roses):
    """`roses run` in a process group of its own, signalled or killed as a whole."""

    def launch(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "roses_app.cli", "run", "-c", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self) -> float:
        started = time.monotonic()
        self.launch()
        wait_for(self.healthy, 180, "the daemon's /healthz")
        return time.monotonic() - started

    def signal_group(self, signum: int) -> int:
        assert self.proc is not None
        os.killpg(self.proc.pid, signum)
        code = self.proc.wait(timeout=180)
        self.proc = None
        return code

    def kill_everything(self) -> None:
        """SIGKILL to every process of the daemon at once: its group, and the Spark JVM
        with its Python workers (a session of their own), as a power cut would."""
        assert self.proc is not None
        assert self.proc.poll() is None, f"roses run died:\n{self.log.read_text()[-3000:]}"
        everyone = descendants(self.proc.pid)
        for pid in everyone:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None


def descendants(root: int) -> list[int]:
    """root and every process below it (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def numbered(folder: Path) -> set[int]:
    """The batch ids of a checkpoint log folder (offsets/ or commits/)."""
    with contextlib.suppress(FileNotFoundError):
        return {int(name) for name in os.listdir(folder) if name.isdigit()}
    return set()


def batch_in_flight(checkpoint: Path, after: int) -> int | None:
    """A batch after ``after`` that Spark has planned (offsets) and not committed."""
    pending = numbered(checkpoint / "offsets") - numbered(checkpoint / "commits")
    newer = [batch for batch in pending if batch > after]
    return max(newer) if newer else None


def last_stored(data: Path) -> int:
    """The newest batch id the store has applied (-1: none)."""
    store = data / "store.sqlite"
    if not store.exists():
        return -1
    with contextlib.closing(sqlite3.connect(store, timeout=1)) as db:
        try:
            row = db.execute(
                "SELECT max(batch_id) FROM batches WHERE query_id = ?", (STATELESS,)
            ).fetchone()
        except sqlite3.OperationalError:  # being created
            return -1
    return -1 if row is None or row[0] is None else int(row[0])


def stored_not_committed(data: Path, after: int) -> int | None:
    """A batch after ``after`` whose rows the store has applied and whose checkpoint
    commit is not written yet: between the sink's transaction and Spark's commit."""
    applied = last_stored(data)
    # the store first, then the checkpoint: a commit landing in between is seen
    if applied <= after or applied in numbered(data / "checkpoints" / STATELESS / "commits"):
        return None
    return applied


def poll_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.005) -> Any:
    """wait_for at a pace that catches a window of a few milliseconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def assert_published_once(
    data: Path, served: set[str], others: frozenset[str] = frozenset()
) -> None:
    """Every item served is published, and none twice: each entry written once and
    never replaced, each micro-batch applied once, each item spooled once (and so
    are the ``others``, of sources no stream publishes)."""
    with contextlib.closing(sqlite3.connect(data / "store.sqlite")) as db:
        entries = db.execute(
            "SELECT guid, created_at = updated_at FROM entries WHERE stream = 'everything'"
        ).fetchall()
        count, last, rows = db.execute(
            "SELECT count(*), max(batch_id), sum(rows) FROM batches WHERE query_id = ?",
            (STATELESS,),
        ).fetchone()
    assert {guid for guid, _ in entries} == served
    assert [guid for guid, once in entries if not once] == []
    assert last < KEEP_BATCHES, "the store forgot old batch ids: run fewer batches"
    assert (count, rows) == (last + 1, len(served))
    spool = Spool(data / "spool")
    try:
        spooled = Counter(
            etree.fromstring(e.item).findtext("guid") for e in spool.events() if e.item
        )
    finally:
        spool.close()
    assert spooled == Counter(served | others)


@pytest.fixture
def lifecycle(tmp_path: Path) -> Iterator[Callable[..., tuple[Site, Job, Path]]]:
    server = FeedServer()
    jobs: list[Job] = []

    def make(trigger: str, more: str = "", others: int = 0) -> tuple[Site, Job, Path]:
        port = free_port()
        config = tmp_path / "feeds.yaml"
        data = tmp_path / "data"
        feed = server.url("/news.xml")
        sources = "".join(
            f'  other{n}: {{feed: "{server.url(f"/other/{n}.xml")}", every: 20s}}\n'
            for n in range(others)
        )
        for n in range(others):  # one item each, answered 304 once fetched
            body = rss((f"o{n}", f"other {n}"))
            server.routes[f"/other/{n}.xml"] = conditional(body, etag=f'"o{n}"')
        text = CONFIG.format(
            data=data, port=port, feed=feed, trigger=trigger, more=more, sources=sources
        )
        config.write_text(text)
        jobs.append(Job(config, port, tmp_path / "roses.log"))
        return Site(server), jobs[-1], data

    try:
        yield make
    finally:
        for job in jobs:
            if job.proc is not None and job.proc.poll() is None:
                job.kill_everything()
        server.close()


def items(first: int, count: int) -> list[tuple[str, str]]:
    return [(f"g{n}", f"item {n}") for n in range(first, first + count)]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_to_the_group_finishes_the_batch_and_exits_0(
    lifecycle: Callable[..., tuple[Site, Job, Path]], signum: int
) -> None:
    site, roses, data = lifecycle("1s")
    site.publish(*items(0, 1))
    roses.start()
    wait_for(lambda: roses.guids(FEED) == ["g0"], 120, "the first item")
    checkpoint = data / "checkpoints" / STATELESS
    planned = max(numbered(checkpoint / "offsets"))
    site.publish(*items(1, 3000))  # one poll, one spool file: one big micro-batch
    in_flight = partial(batch_in_flight, checkpoint, planned)
    batch = poll_until(in_flight, 120, "a micro-batch in flight")
    said_before = roses.log.stat().st_size
    assert roses.signal_group(signum) == 0, roses.log.read_text()[-5000:]
    said = roses.log.read_bytes()[said_before:].decode()
    assert [n for n in NOISE if n in said] == [], said
    assert len(said.splitlines()) <= 8, said  # received, stopping, stopped, the server's
    assert batch in numbered(checkpoint / "commits")  # finished, not cancelled

    roses.start()
    served = {guid for guid, _ in site.items}
    wait_for(lambda: set(roses.guids(FEED)) == served, 120, "every item after the restart")
    assert roses.signal_group(signal.SIGTERM) == 0
    assert_published_once(data, served)


def test_a_second_process_on_the_data_folder_is_refused_at_once(
    lifecycle: Callable[..., tuple[Site, Job, Path]],
) -> None:
    site, roses, data = lifecycle("1s", HOURLY)
    site.publish(*items(0, 2))
    roses.start()
    wait_for(lambda: len(roses.guids(FEED)) == 2, 120, "the first items")
    assert roses.proc is not None
    once = [sys.executable, "-m", "roses_app.cli", "once", "-c", str(roses.config)]
    refused = subprocess.run(once, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1
    assert f"data folder {data} is in use by ROSES PID {roses.proc.pid}" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    health = httpx.get(roses.url("/healthz"), timeout=5).json()
    assert health["ok"] and health["query_restarts"] == 0  # the daemon did not notice
    assert roses.signal_group(signal.SIGTERM) == 0

    # the daemon and its JVM are gone: the folder is free, and a `once` log is clean
    site.publish(*items(2, 1))
    done = subprocess.run(once, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if not LOG_LINE.match(line)] == []
    assert [n for n in NOISE if n in done.stderr] == [], done.stderr
    assert_published_once(data, {"g0", "g1", "g2"})


def test_ctrl_c_ends_once_quietly_and_the_next_once_finishes_the_work(
    lifecycle: Callable[..., tuple[Site, Job, Path]],
) -> None:
    site, roses, data = lifecycle("1s")
    site.publish(*items(0, 3000))
    once = [sys.executable, "-m", "roses_app.cli", "once", "-c", str(roses.config)]
    with open(roses.log, "wb") as log:
        cut = subprocess.Popen(once, stderr=log, start_new_session=True)
        checkpoint = data / "checkpoints" / STATELESS
        try:
            poll_until(partial(batch_in_flight, checkpoint, -1), 180, "a micro-batch in flight")
        finally:
            os.killpg(cut.pid, signal.SIGINT)  # a terminal's Ctrl-C
            assert cut.wait(timeout=120) == 130
    said = roses.log.read_text()
    assert said.endswith("roses: interrupted\n") and "Traceback" not in said, said
    assert [n for n in NOISE if n in said] == [], said

    done = subprocess.run(once, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_published_once(data, {guid for guid, _ in site.items})


class Feeder:
    """A source that keeps publishing: one new item every ``every`` seconds."""

    def __init__(self, site: Site, every: float) -> None:
        self.site, self.every = site, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            self.site.publish(*items(len(self.site.items), 1))

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


KILLS = ["window"] * 2 + ["batch"] * 2 + ["any"] * 6
OTHERS = 999  # sources besides news: a thousand in all


def test_kill_9_at_random_points_loses_and_repeats_nothing(
    lifecycle: Callable[..., tuple[Site, Job, Path]],
) -> None:
    """Ten kill -9 of everything, at seeded random points: during start-up or polling
    ("any"), in a micro-batch ("batch"), and between a batch's store transaction and its
    checkpoint commit ("window"); then one clean run publishes what is left.  With a
    thousand sources: polls in flight and commits of many polls at once are cut too."""
    # few batches: the store keeps 100 batch ids
    site, roses, data = lifecycle("2s", others=OTHERS)
    rng = random.Random(10)
    site.publish(*items(0, 5))
    windows = 0
    checkpoint = data / "checkpoints" / STATELESS
    with Feeder(site, every=0.5):
        for mode in rng.sample(KILLS, len(KILLS)):
            # a batch left half-done by the last kill is not the one to wait for
            planned, stored = max(numbered(checkpoint / "offsets"), default=-1), last_stored(data)
            launched = time.monotonic()
            roses.launch()
            if mode == "any":
                time.sleep(rng.uniform(0.5, 25.0))  # start-up, polling, batches
            elif mode == "batch":
                in_flight = partial(batch_in_flight, checkpoint, planned)
                poll_until(in_flight, 120, "a micro-batch in flight", every=0.02)
                time.sleep(rng.uniform(0.0, 0.3))
            else:
                window = partial(stored_not_committed, data, stored)
                poll_until(window, 120, "a batch stored and not committed", every=0.01)
            roses.kill_everything()
            # everything is dead: what the checkpoint lacks now, the restart replays
            hit = mode == "window" and stored_not_committed(data, stored) is not None
            windows += hit
            after = time.monotonic() - launched
            print(f"kill -9 ({mode}{', verified' if hit else ''}) {after:.1f}s after start")
    served = {guid for guid, _ in site.items}
    roses.start()
    wait_for(lambda: set(roses.guids(FEED)) == served, 180, "every item served")
    assert roses.signal_group(signal.SIGTERM) == 0
    print(f"{len(KILLS)} kill -9, {windows} between store and checkpoint, {len(served)} items")
    assert windows >= 1
    assert_published_once(data, served, frozenset(f"o{n}" for n in range(OTHERS)))
