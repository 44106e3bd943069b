"""A running `roses run` takes a changed feeds.yaml without a restart: a stream applied
with apply_stream and SIGHUP, another written into the file on disk, a changed one
(computed again from the spool), a removed one, a broken edit and a setting that needs
a restart; the unchanged stream keeps its published items and its position, and the
JVM is the same."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from test_connector_support import FeedServer
from test_e2e import Site, free_port, wait_for
from test_lifecycle import Job, descendants, numbered

from roses_app.config.edit import apply_stream
from roses_app.daemon_reload import ConfigWatcher

pytestmark = pytest.mark.e2e

CONFIG = """\
# the reload test's config: comments and layout are kept by apply_stream
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: 500ms}}
  fetch: {{per_host: 8}}
sources:
  news: {{feed: "{feed}", every: 1s}}
streams:
  everything:   # never changed: its items and its position must stay as they are
    filter: {{from: news, where: "not(starts-with(title, 'never'))"}}
    publish: {{title: "Everything", keep: {{count: 1000}}}}
  doomed:
    filter: {{from: news, where: "contains(title, 'sport')"}}
    publish: true
"""
VOLCANO = "filter: {from: news, where: \"contains(title, 'volcano')\"}\npublish: true\n"
SPORT = """  sport-news:
    filter: {from: news, where: "contains(title, 'sport')"}
    publish: {title: "Sport"}
"""


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Site, Job, Path]]:
    server = FeedServer()
    port = free_port()
    config = tmp_path / "feeds.yaml"
    data = tmp_path / "data"
    config.write_text(CONFIG.format(data=data, port=port, feed=server.url("/news.xml")))
    job = Job(config, port, tmp_path / "roses.log")
    try:
        yield Site(server), job, data
    finally:
        if job.proc is not None and job.proc.poll() is None:
            job.kill_everything()
        server.close()


def entries(data: Path, stream: str) -> dict[str, tuple[float, float]]:
    """guid -> (created, updated) of a stream's stored items."""
    with contextlib.closing(sqlite3.connect(data / "store.sqlite", timeout=5)) as db:
        rows = db.execute(
            "SELECT guid, created_at, updated_at FROM entries WHERE stream = ?", (stream,)
        ).fetchall()
    return {guid: (created, updated) for guid, created, updated in rows}


def java(pid: int) -> set[int]:
    """The Java processes below ``pid`` (Spark's JVM; its Python workers come and go)."""
    found = set()
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                found.add(child)
    return found


def status(job: Job, path: str) -> int:
    return httpx.get(job.url(path), timeout=5).status_code


def said(job: Job, text: str) -> bool:
    return text in job.log.read_text()


def test_streams_added_changed_and_removed_without_a_restart(
    running: tuple[Site, Job, Path],
) -> None:
    roses = running[1]
    try:
        check_reloads(*running)
    except AssertionError as exc:  # what the daemon said, to tell why
        raise AssertionError(f"{exc}\n--- roses.log:\n{roses.log.read_text()[-6000:]}") from exc


def check_reloads(site: Site, roses: Job, data: Path) -> None:
    site.publish(("g0", "volcano erupts"), ("g1", "sport results"), ("g2", "weather"))
    roses.start()
    assert roses.proc is not None
    wait_for(lambda: len(roses.guids("/feeds/everything.rss")) == 3, 120, "the first items")
    wait_for(lambda: roses.guids("/feeds/doomed.rss") == ["g1"], 60, "doomed's item")
    jvm = java(roses.proc.pid)
    assert jvm, "no Spark JVM under roses run"
    before = entries(data, "everything")
    commits = data / "checkpoints" / "stateless" / "commits"
    # Spark writes a batch's commit after its sink, so the feed can show
    # the items a moment before the batch is in the commit log
    wait_for(lambda: numbered(commits), 30, "the first batch's commit")
    committed = numbered(commits)  # the stateless query's batches so far
    text = roses.config.read_text()

    # 1. the console's way: apply_stream, then SIGHUP
    applied = apply_stream(roses.config, "volcano", VOLCANO)
    assert applied.backup.read_text() == text
    assert roses.config.read_text() == text + (
        "  volcano:\n"
        "    filter: {from: news, where: \"contains(title, 'volcano')\"}\n"
        "    publish: true\n"
    )
    asked = time.monotonic()
    os.kill(roses.proc.pid, signal.SIGHUP)
    wait_for(lambda: roses.guids("/feeds/volcano.rss") == ["g0"], 60, "the new stream's feed")
    took = time.monotonic() - asked
    assert took < 30, f"the new stream's feed took {took:.1f}s"
    # (the reload that SIGHUP asks, unless the file's change on disk was seen first)
    done = "streams added: volcano, Spark queries restarted"
    wait_for(lambda: said(roses, done), 30, "the reload's line in the log")
    wait_for(lambda: said(roses, "reload (SIGHUP): "), 30, "SIGHUP's reload")
    site.publish(("g3", "volcano again"), ("g4", "markets"))
    wait_for(lambda: roses.guids("/feeds/volcano.rss") == ["g3", "g0"], 60, "a new item")
    wait_for(lambda: len(roses.guids("/feeds/everything.rss")) == 5, 60, "everything's")

    # 2. the file edited on disk: a stream removed, another added, one changed, a
    # setting changed
    edited = roses.config.read_text()
    start = edited.index("  doomed:\n")
    end = edited.index("  volcano:\n")
    edited = edited[:start] + edited[end:] + SPORT
    edited = edited.replace("fetch: {per_host: 8}", "fetch: {per_host: 6}")
    edited = edited.replace("contains(title, 'volcano')", "contains(title, 'markets')")
    roses.config.write_text(edited)
    wait_for(lambda: status(roses, "/feeds/doomed.rss") == 404, 60, "doomed's 404")
    wait_for(lambda: roses.guids("/feeds/sport-news.rss") == ["g1"], 60, "sport-news' feed")
    done = (
        "streams added: sport-news; changed: volcano; removed (published items forgotten): doomed"
    )
    wait_for(lambda: said(roses, done), 30, "the reload's line in the log")
    # the changed stream computed from the spool: the item its new filter takes
    wait_for(lambda: "g4" in roses.guids("/feeds/volcano.rss"), 60, "volcano's new item")
    assert said(roses, "settings.fetch changed in")
    assert said(roses, "needs a restart")
    assert entries(data, "doomed") == {}

    # 3. a broken edit: said at its file:line, the running config kept
    roses.config.write_text(edited.replace("contains(title, 'sport')", "contains(title, "))
    line = edited[: edited.index("contains(title, 'sport')")].count("\n") + 1
    wait_for(lambda: said(roses, f"{roses.config}:{line}: XPath syntax error"), 30, "the error")
    assert said(roses, "failed, the running config is kept")
    assert status(roses, "/feeds/sport-news.rss") == 200

    # the unchanged stream: its items published once, at their first time; same JVM
    site.publish(("g5", "volcano sport"))
    wait_for(lambda: len(roses.guids("/feeds/everything.rss")) == 6, 60, "the last item")
    wait_for(lambda: roses.guids("/feeds/sport-news.rss") == ["g5", "g1"], 60, "sport g5")
    assert "g5" not in roses.guids("/feeds/volcano.rss")  # its new filter follows live
    after = entries(data, "everything")
    assert {guid: after[guid] for guid in before} == before
    assert sorted(after) == [f"g{n}" for n in range(6)]
    assert all(created == updated for created, updated in after.values())
    # the stateless query went on from its checkpoint: its batch ids continue
    assert committed and committed <= numbered(commits)
    assert max(numbered(commits)) > max(committed)
    health = httpx.get(roses.url("/healthz"), timeout=5).json()
    assert health["ok"] and set(health["streams"]) == {"everything", "volcano", "sport-news"}
    assert java(roses.proc.pid) == jvm  # the same JVM: Spark was not started again
    assert roses.signal_group(signal.SIGTERM) == 0


def test_the_watcher_waits_for_a_file_to_settle(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_text("a")
    now = [100.0]
    watcher = ConfigWatcher([path], settle=1.0, clock=lambda: now[0])
    assert not watcher.due()
    path.write_text("ab")
    assert not watcher.due()  # changed: wait
    now[0] += 0.5
    path.write_text("abc")
    assert not watcher.due()  # changed again: wait again
    now[0] += 0.9
    assert not watcher.due()
    now[0] += 0.2
    assert watcher.due()
    watcher.mark()
    assert not watcher.due()
    path.unlink()
    now[0] += 5
    assert not watcher.due()
    now[0] += 1.5
    assert watcher.due()  # a file gone is a change too


def test_what_a_new_config_changes_and_what_needs_a_restart(tmp_path: Path) -> None:
    from roses_app.config import load_config
    from roses_app.daemon_reload import differences

    path = tmp_path / "feeds.yaml"
    path.write_text(CONFIG.format(data=tmp_path / "data", port=8080, feed="http://127.0.0.1:1/a"))
    old = load_config(path)
    text = CONFIG.format(data=tmp_path / "other", port=9090, feed="http://127.0.0.1:1/b")
    text = text.replace("trigger: 500ms", "trigger: 2s").replace("local[2]", "local[1]")
    text = text.replace("title, 'sport'", "title, 'football'").replace("  doomed:", "  kept:")
    path.write_text(text + "  more: news\n")
    found = differences(old, load_config(path), "test")
    result = found.result
    assert result.streams_added == ("kept", "more") and result.streams_removed == ("doomed",)
    assert result.streams_changed == () and result.forgotten == ("doomed",)
    assert (result.sources_changed, result.sources_added, result.sources_removed) == (
        ("news",),
        (),
        (),
    )
    assert result.needs_restart == ("settings.data_dir", "settings.http", "settings.spark")
    settings = found.config.settings
    assert settings.data_dir == old.settings.data_dir and settings.http == old.settings.http
    assert settings.spark.master == "local[2]" and settings.spark.trigger_seconds == 2.0
    assert found.plans_changed and found.sources_changed
    same = differences(old, old, "nothing")
    assert not same.plans_changed and not same.sources_changed and not same.result.changed
