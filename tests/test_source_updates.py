"""Sources added, changed and removed while the connectors run (a config reloaded)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from test_connector_support import FeedServer, Reply, rss, until
from test_mail_imap import connectors, imap_source
from test_mail_support import (  # noqa: F401  (the *_fixture are fixtures)
    Dovecot,
    ListSink,
    dovecot_server_fixture,
    message,
    wait_for,
)

from roses_app.config.model import FeedSource, FetchSettings, MailSource
from roses_app.connectors.mail import MailConnectors
from roses_app.connectors.poller import Items
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import StateStore

SETTINGS = FetchSettings(timeout_seconds=3.0)


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sources: list[str] = []

    def __call__(self, polls: Sequence[tuple[str, Items]]) -> None:
        with self.lock:
            self.sources.extend(source for source, _ in polls)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    s = StateStore(tmp_path / "state.sqlite")
    yield s
    s.close()


def test_feed_sources_added_changed_and_removed_while_polling(
    feed_server: FeedServer, store: StateStore
) -> None:
    for path in ("/a", "/b", "/c"):
        feed_server.routes[path] = Reply(200, rss((path, path)))
    a = FeedSource("a", feed_server.url("/a"), 0.3)
    b = FeedSource("b", feed_server.url("/b"), 0.3)
    scheduler = FeedScheduler(store, SETTINGS, {"a": a}, Sink())
    scheduler.start()
    try:
        until(lambda: len(feed_server.hits("/a")) >= 2)
        assert feed_server.hits("/b") == []
        scheduler.update_sources({"a": a, "b": b})  # b added: polled at once
        until(lambda: len(feed_server.hits("/b")) >= 2, 5)
        moved = FeedSource("b", feed_server.url("/c"), 0.3)
        scheduler.update_sources({"b": moved})  # a removed, b moved to /c
        until(lambda: len(feed_server.hits("/c")) >= 2, 5)
        time.sleep(0.5)  # a poll of a or of b's old URL in flight when updated ends
        polled = len(feed_server.hits("/a")), len(feed_server.hits("/b"))
        time.sleep(1.5)  # five of their intervals
        assert (len(feed_server.hits("/a")), len(feed_server.hits("/b"))) == polled
        assert len(feed_server.hits("/c")) >= 4
        assert set(scheduler.sources) == {"b"} and scheduler.queue.due_at("a") is None
    finally:
        scheduler.shutdown(wait=True)


def test_mail_sources_updated_while_running(tmp_path: Path) -> None:
    folders = {name: tmp_path / name for name in ("one", "two")}
    for folder in folders.values():
        for sub in ("cur", "new", "tmp"):
            (folder / sub).mkdir(parents=True)
    one = MailSource("one", "maildir", 0.2, path=folders["one"])
    two = MailSource("two", "maildir", 0.2, path=folders["two"])
    mail = MailConnectors({"one": one}, None, lambda source, items: None, data_dir=tmp_path)
    mail.start()
    try:
        until(lambda: "one" in mail.last_results)
        assert not mail.update_sources({"one": one})  # unchanged: nothing restarted
        assert mail.update_sources({"two": two})
        until(lambda: "two" in mail.last_results)
        assert "one" not in mail.last_results and mail.sources == [two]
        assert mail.running
    finally:
        mail.close()
    idle = MailConnectors({}, None, lambda source, items: None, data_dir=tmp_path / "idle")
    idle.start()  # started with no mail source: one added later is read
    try:
        assert not idle.running
        assert idle.update_sources({"one": one})
        until(lambda: "one" in idle.last_results)
    finally:
        idle.close()


def test_a_changed_mail_source_restarts_only_its_own_worker(
    dovecot_server: Dovecot, tmp_path: Path
) -> None:
    """Two IMAP sources idling and a Maildir: one IMAP source changed, then removed,
    and the other keeps its connection (and IDLE), the Maildir its schedule."""
    boxes = {name: dovecot_server.mailbox() for name in ("a", "b")}
    a, b = (imap_source(boxes[n], name=n, every=600.0) for n in ("a", "b"))
    for sub in ("cur", "new", "tmp"):
        (tmp_path / "m" / sub).mkdir(parents=True)
    m = MailSource("m", "maildir", 600.0, path=tmp_path / "m")
    sink = ListSink()
    mail = connectors(tmp_path, [a, b, m], sink)
    opened: Counter[str] = Counter()  # IMAP connections made, per source
    session = mail.poller.imap_session

    @contextmanager
    def counted(source: MailSource) -> Iterator[object]:
        opened[source.name] += 1
        with session(source) as found:
            yield found

    mail.poller.imap_session = counted  # type: ignore[assignment,method-assign]
    mail.start()
    try:
        assert mail.wait_ready(10)
        wait_for(lambda: "m" in mail.last_results)
        polled_m = mail.last_results["m"][0]
        before = dict(mail.workers)
        changed = replace(b, every_seconds=300.0)
        assert mail.update_sources({"a": a, "b": changed, "m": m})
        assert mail.workers["a"] is before["a"] and before["a"].thread.is_alive()
        assert not before["b"].thread.is_alive() and mail.workers["b"].source == changed
        wait_for(lambda: opened["b"] == 2)
        for n, name in enumerate(("a", "b")):  # both read new mail within seconds
            boxes[name].deliver(message(n, subject=f"to {name}"))
            wait_for(lambda name=name: len(sink.items(name)) == 1, timeout=5.0)  # type: ignore[misc]
        assert opened == {"a": 1, "b": 2}  # a's first connection still idles
        assert mail.last_results["m"][0] == polled_m  # not polled again (every 600 s)
        assert mail.update_sources({"a": a, "m": m})  # b removed: its worker ends
        assert set(mail.workers) == {"a"} and mail.workers["a"] is before["a"]
        assert "b" not in mail.last_results and opened["a"] == 1
        moved = replace(m, every_seconds=0.2)  # the Maildir's job alone is scheduled again
        assert mail.update_sources({"a": a, "m": moved})
        wait_for(lambda: mail.last_results["m"][0] > polled_m + 0.3)
        assert mail.workers["a"] is before["a"] and opened["a"] == 1
    finally:
        mail.shutdown()
        mail.store.close()
