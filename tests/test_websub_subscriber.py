"""Push in, for real: the feed connector subscribes through the hub a feed names, the
hub verifies at ROSES's callback and pushes signed content, whose items reach the sink.
Against ROSES's own hub (another ROSES server) and against a hub the test runs."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from test_connector_support import FeedServer, Reply, rss, until
from test_e2e import free_port
from test_websub import Roses as UpstreamRoses
from test_websub import make_config

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Items
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import StateStore
from roses_app.connectors.websub_in import (
    Push,
    PushTable,
    Subscriber,
    is_pushed,
    link_rel,
)
from roses_app.publish import HttpServer, create_app
from roses_app.store import Store
from roses_app.websub_signature import sign

WAIT = 45.0  # a loaded machine (the suite runs two processes)


def wait_for(predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    until(predicate, timeout)


class Sink:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, polls: Sequence[tuple[str, Items]]) -> None:
        with self.lock:
            self.items += [(source, xml) for source, items in polls for xml, _ in items]

    def has(self, text: str) -> bool:
        with self.lock:
            return any(text in xml for _, xml in self.items)


class Downstream:
    """The feed connector with its subscriber, and the server its callback is on."""

    def __init__(self, tmp_path: Path, sources: list[FeedSource]) -> None:
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.table = PushTable(tmp_path / "websub_in.sqlite")
        self.subscriber = Subscriber(self.table, self.base, time.time)
        self.states = StateStore(tmp_path / "sources.sqlite")
        self.sink = Sink()
        settings = FetchSettings(timeout_seconds=5.0, min_every_seconds=1.0)
        self.scheduler = FeedScheduler(
            self.states, settings, sources, self.sink, subscriber=self.subscriber
        )
        config = make_config(tmp_path)
        self.store = Store(tmp_path / "store.sqlite")
        pushes = (self.subscriber, self.scheduler.pushed, settings.max_bytes)
        app = create_app(config, self.store, lambda: {"ok": True}, pushes=pushes)
        self.server = HttpServer(app, "127.0.0.1", port)
        self.server.start()
        self.scheduler.start()

    def push(self, source: str) -> Push:
        push = self.subscriber.get(source)
        assert push is not None
        return push

    def close(self) -> None:
        self.scheduler.shutdown()
        self.server.stop()
        self.store.close()
        self.states.close()
        self.table.close()


def test_roses_subscribes_to_roses_and_takes_its_pushes(tmp_path: Path):
    upstream = UpstreamRoses(tmp_path / "up")
    upstream.write(range(2))
    topic = f"{upstream.url}/feeds/news.rss"
    source = FeedSource("news", topic, 3600.0, fixed=False)
    down = Downstream(tmp_path / "down", [source])
    try:
        wait_for(lambda: down.sink.has("guid-1"))  # the first poll
        wait_for(lambda: down.subscriber.get("news") is not None)
        wait_for(lambda: down.push("news").status == "verified")
        assert down.push("news").hub == f"{upstream.url}/websub/hub"
        upstream.write(range(2, 4))  # the upstream hub pushes the changed feed
        wait_for(lambda: down.sink.has("guid-3"))
        # counted once the push's items are committed, a moment after the sink has them
        wait_for(lambda: down.scheduler.pushes >= 1 and down.push("news").pushes >= 1)
        state = down.states.get("news")
        assert state is not None and state.n_polls == 1  # the hub delivered: no second poll
        interval = down.scheduler.intervals["news"]
        assert "WebSub pushes arrive" in interval.reason
    finally:
        down.close()
        upstream.close()


class Hub:
    """A WebSub hub: takes subscriptions, verifies them, publishes signed content."""

    def __init__(self) -> None:
        self.subscriptions: list[dict[str, str]] = []
        self.verified: list[str] = []
        self.modes: list[str] = []  # hub.mode of each verified request
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                owner.subscriptions.append(form)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                threading.Thread(target=owner._verify, args=(form,), daemon=True).start()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hub"

    def _verify(self, form: dict[str, str]) -> None:
        challenge = secrets.token_hex(8)
        query = {"hub.mode": form["hub.mode"], "hub.topic": form["hub.topic"],
                 "hub.challenge": challenge, "hub.lease_seconds": "300"}  # fmt: skip
        answer = httpx.get(f"{form['hub.callback']}?{urlencode(query)}", timeout=5)
        if answer.status_code == 200 and answer.text == challenge:
            self.verified.append(form["hub.callback"])
            self.modes.append(form["hub.mode"])

    def publish(self, body: bytes, *, forged: bool = False) -> int:
        form = [f for f in self.subscriptions if f["hub.mode"] == "subscribe"][-1]
        secret = "not the secret" if forged else form["hub.secret"]
        headers = {"Content-Type": "application/rss+xml", "X-Hub-Signature": sign(secret, body)}
        return httpx.post(
            form["hub.callback"], content=body, headers=headers, timeout=5
        ).status_code

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub() -> Iterator[Hub]:
    h = Hub()
    yield h
    h.close()


def hubbed_feed(tmp_path: Path, feed_server: FeedServer, hub: Hub) -> tuple[str, Downstream]:
    """A feed naming ``hub`` in a Link header, and the connector polling it."""
    topic = feed_server.url("/feed.xml")
    feed_server.routes["/feed.xml"] = Reply(
        200, rss(("a", "First")), {"Link": f'<{hub.url}>; rel="hub", <{topic}>; rel="self"'}
    )
    return topic, Downstream(tmp_path, [FeedSource("feed", topic, 3600.0, fixed=False)])


def test_a_hub_named_in_a_link_header_is_subscribed_and_forged_pushes_ignored(
    tmp_path: Path, feed_server: FeedServer, hub: Hub
):
    topic, down = hubbed_feed(tmp_path, feed_server, hub)
    try:
        wait_for(lambda: len(hub.verified) == 1)
        (form,) = hub.subscriptions
        assert form["hub.mode"] == "subscribe" and form["hub.topic"] == topic
        assert form["hub.callback"].startswith(f"{down.base}/websub/callback/")
        assert len(form["hub.secret"]) >= 32  # ROSES always sends one
        push = down.push("feed")
        assert push.status == "verified" and push.lease_expires - time.time() > 200

        forged = rss(("forged", "Forged item"))
        assert hub.publish(forged, forged=True) == 202  # acknowledged, ignored
        assert hub.publish(rss(("b", "Pushed item"))) == 202
        wait_for(lambda: down.sink.has("Pushed item"))
        assert not down.sink.has("Forged item") and down.push("feed").refused == 1
        unknown = httpx.post(f"{down.base}/websub/callback/nobody", content=b"x", timeout=5)
        assert unknown.status_code == 404
        bad_topic = httpx.get(
            form["hub.callback"],
            params={
                "hub.mode": "subscribe",
                "hub.topic": "http://elsewhere/",
                "hub.challenge": "x",
            },
            timeout=5,
        )
        assert bad_topic.status_code == 404  # never confirms what ROSES did not ask
        assert len(feed_server.hits("/feed.xml")) == 1
    finally:
        down.close()


def test_link_headers_and_when_pushes_stand_in_for_polls():
    header = '<https://hub.example/>; rel="hub", <https://site/feed>; rel="self alternate"'
    assert link_rel(header, "hub") == "https://hub.example/"
    assert link_rel(header, "self") == "https://site/feed"
    assert link_rel("garbage", "hub") is None and link_rel(None, "hub") is None
    push = Push("s", "h", "t", "tok", "sec", "verified", lease_expires=10_000.0,
                verified_at=1_000.0, last_push_at=2_000.0)  # fmt: skip
    assert is_pushed(push, 2_500.0, 600.0)  # a push 500 s ago, the feed's interval 600 s
    assert not is_pushed(push, 4_000.0, 600.0)  # quiet for 2,000 s: pushes have stopped
    assert not is_pushed(push, 11_000.0, 1e9)  # the lease ended
    assert not is_pushed(None, 2_500.0, 600.0)


def test_leases_are_renewed_before_they_end_and_unverified_asks_repeated(tmp_path: Path):
    now = [1_000_000.0]
    with PushTable(tmp_path / "p.sqlite") as table:
        table.put(
            Push("a", "h", "t", "tok-a", "s", "asked", asked_at=now[0], retry_at=now[0] + 3600)
        )
        subscriber = Subscriber(table, "https://roses.example", lambda: now[0])
        status, body = subscriber.verify(
            "tok-a",
            {
                "hub.mode": "subscribe",
                "hub.topic": "t",
                "hub.challenge": "c",
                "hub.lease_seconds": "86400",
            },
        )
        assert (status, body) == (200, "c")
        assert subscriber.due_renewals() == []
        now[0] += 86400 - 9000  # 2.5 h before the lease ends: not yet
        assert subscriber.due_renewals() == []
        now[0] += 400  # 2.4 h before: a tenth of the lease ahead, it is renewed
        assert [p.source for p in subscriber.due_renewals()] == ["a"]
        assert urlsplit(subscriber.callback_url("tok-a")).path == "/websub/callback/tok-a"


def test_a_source_that_left_the_config_is_unsubscribed_and_forgotten(
    tmp_path: Path, feed_server: FeedServer, hub: Hub
):
    topic, down = hubbed_feed(tmp_path, feed_server, hub)
    try:
        wait_for(lambda: hub.modes == ["subscribe"])
        callback = hub.subscriptions[0]["hub.callback"]
    finally:
        down.close()
    later = Downstream(tmp_path, [])  # the restart after "feed" left feeds.yaml
    try:
        wait_for(lambda: hub.modes == ["subscribe", "unsubscribe"])
        form = hub.subscriptions[-1]
        # the same token (the test's server has another port each time)
        assert form["hub.mode"] == "unsubscribe"
        assert form["hub.callback"].rpartition("/")[2] == callback.rpartition("/")[2]
        assert form["hub.topic"] == topic
        wait_for(lambda: later.subscriber.get("feed") is None)
        assert later.table.get("feed") is None  # forgotten on disk too
        token, secret = callback.rpartition("/")[2], hub.subscriptions[0]["hub.secret"]
        body = rss(("b", "Too late"))
        late = httpx.post(f"{later.base}/websub/callback/{token}", content=body,
                          headers={"X-Hub-Signature": sign(secret, body)}, timeout=5)  # fmt: skip
        assert late.status_code == 404  # which tells the hub to drop it
        assert not later.sink.has("Too late")
    finally:
        later.close()


def test_a_source_removed_by_a_reload_is_unsubscribed_at_once(
    tmp_path: Path, feed_server: FeedServer, hub: Hub
):
    topic = feed_server.url("/feed.xml")
    feed_server.routes["/feed.xml"] = Reply(
        200, rss(("a", "First")), {"Link": f'<{hub.url}>; rel="hub", <{topic}>; rel="self"'}
    )
    feed = FeedSource("feed", topic, 3600.0, fixed=False)
    down = Downstream(tmp_path, [feed])
    try:
        wait_for(lambda: hub.modes == ["subscribe"])
        down.scheduler.update_sources({})  # feeds.yaml reloaded without it: no restart
        wait_for(lambda: hub.modes == ["subscribe", "unsubscribe"])
        assert hub.subscriptions[-1]["hub.topic"] == topic
        wait_for(lambda: down.subscriber.get("feed") is None)
        assert down.scheduler.sources == {}
    finally:
        down.close()
