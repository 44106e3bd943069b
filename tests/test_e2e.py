"""End to end: `roses run` on a local feed server, read by a real feed reader (newsboat).

The daemon runs as a subprocess exactly as a user starts it; feeds are served by a
real HTTP server on 127.0.0.1; newsboat reloads our published feed into its own cache
database, which we read back.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lxml import etree
from system_packages import require
from test_connector_support import FeedServer, conditional, rss
from test_mail_support import Mailbox, dovecot_fixture, dovecot_server_fixture, message

pytestmark = pytest.mark.e2e
_FIXTURES = (dovecot_fixture, dovecot_server_fixture)  # a real IMAP server for the mail test

CONFIG = """
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: 1s}}
  spool: {{compact_every: 2s}}
sources:
  news: {{feed: "{feed}", every: 1s}}
streams:
  picked:
    filter: {{from: news, where: "starts-with(title, 'keep')"}}
    publish: {{title: "Picked"}}
  bykind:
    split: {{from: news, by: "substring-before(title, ' ')"}}
    publish: true
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class Site:
    """The feed a test serves, with items it can add to."""

    def __init__(self, server: FeedServer) -> None:
        self.server = server
        self.items: list[tuple[str, str]] = []

    def publish(self, *items: tuple[str, str]) -> None:
        self.items.extend(items)
        body = rss(*reversed(self.items))  # newest first, as real feeds do
        self.server.routes["/news.xml"] = conditional(body, etag=f'"v{len(self.items)}"')


class Roses:
    """`roses run` as a subprocess."""

    def __init__(self, config: Path, port: int, log: Path) -> None:
        self.config, self.port, self.log = config, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        started = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "roses_app.cli", "run", "-c", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_for(self.healthy, 180, "the daemon's /healthz")
        return time.monotonic() - started

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"roses run exited with {self.proc.returncode}:\n{self.log.read_text()[-4000:]}"
            )
        try:
            return httpx.get(self.url("/healthz"), timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def guids(self, path: str) -> list[str]:
        reply = httpx.get(self.url(path), timeout=5)
        if reply.status_code != 200:
            return []
        return [g.text or "" for g in etree.fromstring(reply.content).iter("guid")]

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=120)
        self.proc = None
        return code


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[Site, Roses, Path]]:
    server = FeedServer()
    port = free_port()
    config = tmp_path / "feeds.yaml"
    config.write_text(
        CONFIG.format(data=tmp_path / "data", port=port, feed=server.url("/news.xml"))
    )
    roses = Roses(config, port, tmp_path / "roses.log")
    try:
        yield Site(server), roses, tmp_path
    finally:
        if roses.proc is not None:
            roses.proc.kill()
            roses.proc.wait()
        server.close()


def newsboat_reload(home: Path, url: str) -> dict[str, str]:
    """Reload one subscription with newsboat; return its cache: guid -> title."""
    newsboat = require("newsboat")
    home.mkdir(parents=True, exist_ok=True)
    (home / "urls").write_text(url + "\n")
    (home / "config").write_text("")
    cache = home / "cache.db"
    result = subprocess.run(
        [
            str(newsboat),
            "-x",
            "reload",
            "-u",
            str(home / "urls"),
            "-c",
            str(cache),
            "-C",
            str(home / "config"),
        ],
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode() + result.stdout.decode()
    with sqlite3.connect(cache) as db:
        rows = db.execute("SELECT guid, title FROM rss_item WHERE feedurl = ?", (url,)).fetchall()
    return dict(rows)


@pytest.mark.requires("newsboat")
def test_newsboat_subscribes_and_sees_new_items(setup: tuple[Site, Roses, Path]) -> None:
    site, roses, tmp = setup
    site.publish(("g1", "keep one"), ("g2", "drop two"), ("g3", "keep three"))
    cold_start = roses.start()
    wait_for(lambda: len(roses.guids("/feeds/picked.rss")) == 2, 120, "the first items")
    print(f"daemon healthy after {cold_start:.1f}s")

    feed_url = roses.url("/feeds/picked.rss")
    assert newsboat_reload(tmp / "reader", feed_url) == {"g1": "keep one", "g3": "keep three"}

    # Split outputs are feeds of their own, discovered in the OPML.
    wait_for(lambda: roses.guids("/feeds/bykind/drop.rss") == ["g2"], 60, "the split part 'drop'")
    opml = httpx.get(roses.url("/feeds.opml")).text
    assert "/feeds/bykind/drop.rss" in opml and "/feeds/bykind/keep.rss" in opml

    site.publish(("g4", "keep four"), ("g5", "drop five"))
    wait_for(lambda: "g4" in roses.guids("/feeds/picked.rss"), 120, "the new item g4")
    assert newsboat_reload(tmp / "reader", feed_url) == {
        "g1": "keep one",
        "g3": "keep three",
        "g4": "keep four",
    }
    scraped = scrape(roses.url("/metrics"))
    assert scraped[("roses_items_spooled_total", (("source", "news"),))] == 5
    assert scraped[("roses_items_published_total", (("stream", "picked"),))] >= 3
    polls = [v for (name, labels), v in scraped.items() if name == "roses_polls_total"]
    assert sum(polls) >= 2
    assert scraped[("roses_batch_seconds_count", (("query", "stateless"),))] >= 2
    assert scraped[("roses_spool_files", ())] >= 1
    assert roses.stop() == 0


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET a Prometheus endpoint: (sample name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    response = httpx.get(url, timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


@pytest.mark.requires("newsboat")
def test_restart_loses_and_repeats_nothing(setup: tuple[Site, Roses, Path]) -> None:
    site, roses, tmp = setup
    site.publish(("g1", "keep one"))
    roses.start()
    wait_for(lambda: len(roses.guids("/feeds/picked.rss")) == 1, 120, "the first item")
    site.publish(("g2", "keep two"))
    wait_for(lambda: len(roses.guids("/feeds/picked.rss")) == 2, 120, "the second item")
    # Spark archives a batch's spool files once the next batch starts: a third file
    # makes two archived, which the daemon merges while it runs
    site.publish(("g0", "skip zero"))
    wait_for(lambda: roses.guids("/feeds/bykind/skip.rss"), 120, "the third item")
    archive = tmp / "data" / "spool" / "archive"
    wait_for(lambda: list(archive.glob("merged-*.jsonl")), 60, "a compacted spool")
    assert roses.stop() == 0, roses.log.read_text()[-3000:]

    # While ROSES is down the source publishes more; one item is re-sent unchanged.
    site.publish(("g3", "keep three"), ("g4", "drop four"), ("g5", "keep five"))
    roses.start()
    expected = ["g5", "g3", "g2", "g1"]  # newest first
    wait_for(lambda: roses.guids("/feeds/picked.rss") == expected, 120, "all items after restart")
    assert sorted(roses.guids("/feeds/bykind/drop.rss")) == ["g4"]
    assert newsboat_reload(tmp / "reader", roses.url("/feeds/picked.rss")).keys() == set(expected)
    assert roses.stop() == 0

    # Nothing was processed twice: the rows written by every micro-batch of the one
    # stateless query add up to the distinct items the two streams published.
    with sqlite3.connect(tmp / "data" / "store.sqlite") as db:
        written = db.execute(
            "SELECT sum(rows) FROM batches WHERE query_id = 'stateless'"
        ).fetchone()[0]
        stored = db.execute("SELECT count(*) FROM entries").fetchone()[0]
    assert (written, stored) == (10, 10)  # picked: 4; bykind: keep 4, drop 1, skip 1
    with sqlite3.connect(tmp / "data" / "spool" / "index.sqlite") as db:
        assert db.execute("SELECT count(*) FROM keys").fetchone()[0] == 6


MAIL_CONFIG = """
settings:
  data_dir: {data}
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "local[2]", trigger: 1s}}
sources:
  inbox:
    mail: {{imap: {{host: 127.0.0.1, port: {imap_port}, security: none, user: {user},
                   password_env: ROSES_TEST_IMAP_PASSWORD, folder: INBOX, idle: true}}}}
streams:
  newsletters:
    filter: {{from: inbox, where: "starts-with(title, 'Newsletter')"}}
    publish: {{title: "Newsletters"}}
"""


@pytest.mark.requires("newsboat")
def test_newsboat_reads_a_filtered_mailbox(
    dovecot: Mailbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dovecot.deliver(message(1, "Newsletter #1: volcanoes"))
    dovecot.deliver(message(2, "Invoice 2024-01"))
    dovecot.deliver(message(3, "Newsletter #2: football"))
    port = free_port()
    config = tmp_path / "feeds.yaml"
    config.write_text(
        MAIL_CONFIG.format(
            data=tmp_path / "data", port=port, imap_port=dovecot.port, user=dovecot.user
        )
    )
    monkeypatch.setenv("ROSES_TEST_IMAP_PASSWORD", dovecot.password)
    roses = Roses(config, port, tmp_path / "roses.log")
    try:
        roses.start()
        feed = "/feeds/newsletters.rss"
        wait_for(lambda: len(roses.guids(feed)) == 2, 120, "the two newsletters")
        url = roses.url(feed)
        assert newsboat_reload(tmp_path / "reader", url) == {
            "1@roses.test": "Newsletter #1: volcanoes",  # guid: the Message-ID
            "3@roses.test": "Newsletter #2: football",
        }
        # IDLE: a new mail becomes an item without waiting for a poll interval.
        dovecot.deliver(message(4, "Newsletter #3: elections"))
        wait_for(lambda: len(roses.guids(feed)) == 3, 60, "the mail delivered while running")
        assert set(newsboat_reload(tmp_path / "reader", url).values()) == {
            "Newsletter #1: volcanoes",
            "Newsletter #2: football",
            "Newsletter #3: elections",
        }
        assert roses.stop() == 0
    finally:
        if roses.proc is not None:
            roses.proc.kill()
            roses.proc.wait()
