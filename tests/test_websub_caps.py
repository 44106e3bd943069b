"""The WebSub hub's caps on subscriptions per topic and per callback host, for real
(the ROSES server and its hub, subscribers on 127.0.0.1): a new subscription past a
cap gets 403 naming the cap and its setting, its callback is never called, it is
counted; a renewal never counts twice (issue 43.3)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from test_websub import LEASE, WAIT, Roses, Subscriber

from roses_app.config import parse_config
from roses_app.config.model import WebSubSettings
from roses_app.errors import ConfigError
from roses_app.metrics import Metrics, Snapshot
from roses_app.publish.websub import HUB_PATH
from roses_app.publish.websub_table import SubscriptionTable

OPEN = WebSubSettings(lease_seconds=LEASE, allow_private_callbacks=True)


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    s = Subscriber()
    yield s
    s.close()


def callback(sub: Subscriber, n: int, host: str = "127.0.0.1") -> str:
    """The ``n``-th callback URL of ``sub`` (one server answers them all)."""
    return sub.url.replace("127.0.0.1", host) + f"&n={n}"


def ask(roses: Roses, topic: str, url: str, mode: str = "subscribe") -> httpx.Response:
    return roses.request(mode, f"{roses.url}/feeds/{topic}", url)


def called(sub: Subscriber, url: str) -> int:
    """How many verification requests ``url`` got."""
    n = url.rpartition("&n=")[2]
    return sum(1 for v in sub.verifications if v.get("n") == n)


def scrape(roses: Roses) -> str:
    return Metrics(lambda: Snapshot(websub=roses.hub.stats())).exposition()[0].decode()


def test_the_topic_cap(tmp_path: Path, subscriber: Subscriber) -> None:
    roses = Roses(tmp_path, websub=replace(OPEN, max_subscriptions_per_topic=3))
    try:
        roses.write(range(1), stream="topics", part="sport")  # a feed of the split
        # the feed's formats are one topic for the cap: they are one feed to deliver
        for n, topic in enumerate(("news.atom", "news.rss", "news.json")):
            assert ask(roses, topic, callback(subscriber, n)).status_code == 202
            assert roses.hub.drain(WAIT)
        assert len(roses.hub.table.all()) == 3

        over = callback(subscriber, 3)
        answer = ask(roses, "news.atom", over)
        assert answer.status_code == 403, answer.text
        assert "at most 3 subscriptions per topic" in answer.text
        assert "settings.websub.max_subscriptions_per_topic" in answer.text
        assert roses.hub.drain(WAIT) and called(subscriber, over) == 0
        assert len(roses.hub.table.all()) == 3

        # a renewal keeps its place (verified again, not counted twice)
        assert ask(roses, "news.rss", callback(subscriber, 1)).status_code == 202
        assert roses.hub.drain(WAIT) and called(subscriber, callback(subscriber, 1)) == 2
        assert len(roses.hub.table.all()) == 3
        # another feed has places of its own
        assert ask(roses, "topics/sport.atom", over).status_code == 202
        # one that leaves frees a place
        assert ask(roses, "news.atom", callback(subscriber, 0), "unsubscribe").status_code == 202
        assert roses.hub.drain(WAIT)
        assert ask(roses, "news.atom", over).status_code == 202
        assert roses.hub.drain(WAIT) and len(roses.hub.table.all()) == 4

        assert roses.hub.counters["capped_topic"] == 1
        assert roses.hub.counters["capped_callback_host"] == 0
        assert 'roses_websub_events_total{event="capped_topic"} 1.0' in scrape(roses)
    finally:
        roses.close()


def test_the_callback_host_cap(tmp_path: Path, subscriber: Subscriber) -> None:
    roses = Roses(tmp_path, websub=replace(OPEN, max_subscriptions_per_callback_host=2))
    try:
        roses.write(range(1), stream="topics", part="sport")
        for n in range(2):
            assert ask(roses, "news.atom", callback(subscriber, n)).status_code == 202
        assert roses.hub.drain(WAIT)
        over = callback(subscriber, 2)
        for topic in ("news.atom", "topics/sport.rss"):  # whatever the topic
            answer = ask(roses, topic, over)
            assert answer.status_code == 403, answer.text
            assert "at most 2 subscriptions per callback host: 127.0.0.1 has 2" in answer.text
            assert "settings.websub.max_subscriptions_per_callback_host" in answer.text
        # a renewal is no new subscription; another host name has places of its own
        assert ask(roses, "news.atom", callback(subscriber, 1)).status_code == 202
        assert ask(roses, "news.atom", callback(subscriber, 3, "localhost")).status_code == 202
        assert roses.hub.drain(WAIT)
        assert called(subscriber, over) == 0
        assert len(roses.hub.table.all()) == 3
        assert roses.hub.counters["capped_callback_host"] == 2
        assert 'roses_websub_events_total{event="capped_callback_host"} 2.0' in scrape(roses)
    finally:
        roses.close()


def test_a_burst_never_records_past_the_cap(tmp_path: Path, subscriber: Subscriber) -> None:
    # requests answered before any is verified all see places free: the count made
    # with the insert (one transaction) still holds the cap
    roses = Roses(tmp_path, websub=replace(OPEN, max_subscriptions_per_topic=5, per_host=16))
    try:
        answers: list[int] = []

        def send(ns: range) -> None:
            with httpx.Client(base_url=roses.url, timeout=WAIT) as client:
                for n in ns:
                    form = {"hub.mode": "subscribe", "hub.callback": callback(subscriber, n),
                            "hub.topic": f"{roses.url}/feeds/news.atom"}  # fmt: skip
                    answers.append(client.post(HUB_PATH, data=form).status_code)

        threads = [threading.Thread(target=send, args=(range(k, 40, 4),)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert roses.hub.drain(WAIT)
        assert len(answers) == 40 and set(answers) <= {202, 403}
        assert len(roses.hub.table.all()) == 5
        # each of the other 35 stopped once: at its request (403), before its
        # verification, or as it was to be recorded
        assert roses.hub.counters["capped_topic"] == 35
    finally:
        roses.close()


def test_a_table_from_before_the_caps_gets_its_hosts(tmp_path: Path) -> None:
    path = tmp_path / "websub.sqlite"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE TABLE subscriptions (topic TEXT NOT NULL, callback TEXT NOT NULL, "
            "secret TEXT, lease_seconds INTEGER NOT NULL, expires_at REAL NOT NULL, "
            "stream TEXT NOT NULL, part TEXT NOT NULL, base TEXT NOT NULL, "
            "created_at REAL NOT NULL, PRIMARY KEY (topic, callback)) WITHOUT ROWID"
        )
        conn.execute(
            "INSERT INTO subscriptions VALUES ('t', 'https://Reader.Example:8443/cb', NULL, "
            "60, 1e12, 'news', '', 'http://x', 0)"
        )
    conn.close()
    table = SubscriptionTable(path)
    try:
        [sub] = table.all()
        assert sub.callback == "https://Reader.Example:8443/cb"
        with sqlite3.connect(path) as check:
            assert check.execute("SELECT host FROM subscriptions").fetchall() == [
                ("reader.example",)
            ]
    finally:
        table.close()


def test_the_cap_settings_are_read(tmp_path: Path) -> None:
    text = (
        "settings:\n  websub: {max_subscriptions_per_topic: 20000,\n"
        "           max_subscriptions_per_callback_host: 15000}\nsources: {}\nstreams: {}\n"
    )
    got = parse_config(text, tmp_path / "feeds.yaml").settings.websub
    assert (got.max_subscriptions_per_topic, got.max_subscriptions_per_callback_host) == (
        20000,
        15000,
    )
    # the defaults: 10,000 subscribers of one feed fit; a host's callbacks far fewer
    assert WebSubSettings().max_subscriptions_per_topic >= 10_000
    with pytest.raises(ConfigError) as refused:
        parse_config(
            "settings:\n  websub: {max_subscriptions_per_callback_host: 0}\n"
            "sources: {}\nstreams: {}\n",
            tmp_path / "feeds.yaml",
        )
    assert "max_subscriptions_per_callback_host must be a positive whole number" in str(
        refused.value
    )
