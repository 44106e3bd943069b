"""WebSub, for real: the ROSES server (create_app + HttpServer, a real Store) as its own
hub, and subscribers that are HTTP servers on 127.0.0.1 checking what they receive."""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from lxml import etree

from roses_app.algebra.plan.operators import Source, Split
from roses_app.config.model import (
    Config,
    FeedSource,
    HttpSettings,
    Publish,
    Settings,
    StreamConfig,
    WebSubSettings,
)
from roses_app.publish import HttpServer, create_app
from roses_app.publish.websub import HUB_PATH, Hub, sign, signature_ok
from roses_app.store import OutRow, Store

ATOM = "http://www.w3.org/2005/Atom"
LEASE = 10 * 86400
WAIT = 30.0  # seconds a test waits for the hub before failing


class Clock:
    def __init__(self) -> None:
        self.t = float(int(time.time()))

    def __call__(self) -> float:
        return self.t


@dataclass
class Delivery:
    body: bytes
    headers: dict[str, str]
    accepted: bool
    at: float  # time.perf_counter() when received


class Subscriber:
    """A WebSub subscriber: echoes the challenge (unless ``echo`` is off), and accepts a
    delivery only when its signature checks out with ``secret`` (when it has one)."""

    def __init__(self, secret: str | None = None, *, echo: bool = True) -> None:
        self.secret = secret
        self.echo = echo
        self.fail_next = 0  # answer 500 to that many deliveries first
        self.status = 204  # the answer to an accepted delivery
        self.verifications: list[dict[str, str]] = []
        self.deliveries: queue.Queue[Delivery] = queue.Queue()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the test reports what matters

            def do_GET(self) -> None:
                query = {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}
                owner.verifications.append(query)
                body = query.get("hub.challenge", "").encode() if owner.echo else b"no"
                self.send_response(200 if owner.echo else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                at = time.perf_counter()
                headers = {k.lower(): v for k, v in self.headers.items()}
                if owner.fail_next > 0:
                    owner.fail_next -= 1
                    status, accepted = 500, False
                elif owner.secret is not None:
                    accepted = signature_ok(owner.secret, body, headers.get("x-hub-signature"))
                    status = owner.status if accepted else 403
                else:
                    status, accepted = owner.status, True
                # Recorded before answering: the hub may finish (and the test look) as
                # soon as the answer is out.
                owner.deliveries.put(Delivery(body, headers, accepted, at))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/callback?who=me"

    def received(self) -> list[Delivery]:
        out = []
        while not self.deliveries.empty():
            out.append(self.deliveries.get_nowait())
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_config(tmp_path: Path, websub: WebSubSettings | None = None) -> Config:
    src = Source("src")
    streams = {
        "news": StreamConfig("news", src, Publish("News", "All the news", keep_count=5)),
        "topics": StreamConfig("topics", Split(src, "string(category)"), Publish("Topics")),
        "hidden": StreamConfig("hidden", src, None),
    }
    return Config(
        path=tmp_path / "feeds.yaml",
        settings=Settings(
            data_dir=tmp_path,
            http=HttpSettings("127.0.0.1", 0),
            # the subscribers of these tests are on 127.0.0.1
            websub=websub or WebSubSettings(lease_seconds=LEASE, allow_private_callbacks=True),
        ),
        sources={"src": FeedSource("src", "file:x.xml", 60.0)},
        streams=streams,
    )


def item(n: int) -> str:
    return (
        f"<item><title>Story {n}</title><link>https://example.org/{n}</link>"
        f"<description>Text of story {n}</description>"
        f'<guid isPermaLink="false">guid-{n}</guid></item>'
    )


class Roses:
    """The ROSES server with its hub over a data folder; ``port`` 0 picks one."""

    def __init__(self, tmp_path: Path, port: int = 0, websub: WebSubSettings | None = None) -> None:
        self.clock = Clock()
        self.config = make_config(tmp_path, websub)
        self.store = Store(tmp_path / "store.sqlite", clock=self.clock)
        self.hub = Hub(
            self.config,
            self.store,
            tmp_path / "websub.sqlite",
            clock=self.clock,
            retry_delay=0.02,
            max_attempts=3,
        )
        app = create_app(self.config, self.store, lambda: {"ok": True}, hub=self.hub)
        self.server = HttpServer(app, "127.0.0.1", port)
        self.server.start()
        self.hub.start(self.server.url)
        self.client = httpx.Client(base_url=self.server.url, timeout=10)
        self.batch = int(self.clock.t)  # batch ids unique across restarts

    @property
    def url(self) -> str:
        return self.server.url

    def request(self, mode: str, topic: str, callback: str, **extra: str) -> httpx.Response:
        form = {"hub.mode": mode, "hub.topic": topic, "hub.callback": callback}
        form |= {f"hub.{k}": v for k, v in extra.items()}
        return self.client.post(HUB_PATH, data=form)

    def subscribe(self, topic: str, sub: Subscriber, **extra: str) -> None:
        """Subscribe ``sub`` (with its own secret unless ``secret=`` says another)."""
        if sub.secret is not None:
            extra.setdefault("secret", sub.secret)
        answer = self.request("subscribe", topic, sub.url, **extra)
        assert answer.status_code == 202, answer.text
        assert self.hub.drain(WAIT)

    def write(self, ns: range, stream: str = "news", part: str = "") -> None:
        self.batch += 1
        self.clock.t += 10
        ts = 1_700_000_000_000_000
        rows = [OutRow(stream, part, ts + n * 1_000_000, 0, item(n)) for n in ns]
        assert self.store.write_batch("q", self.batch, rows)

    def close(self) -> None:
        self.client.close()
        self.hub.stop()
        self.server.stop()
        self.store.close()


@pytest.fixture
def roses(tmp_path: Path) -> Iterator[Roses]:
    r = Roses(tmp_path)
    yield r
    r.close()


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    s = Subscriber(secret="a secret of the subscriber")
    yield s
    s.close()


def one_delivery(sub: Subscriber) -> Delivery:
    return sub.deliveries.get(timeout=WAIT)


def links(header: str) -> set[tuple[str, str]]:
    """``Link`` header → {(url, rel)}."""
    out = set()
    for part in header.split(","):
        url, _, params = part.strip().partition(";")
        out.add((url.strip().strip("<>"), params.strip().removeprefix("rel=").strip('"')))
    return out


# -- discovery -------------------------------------------------------------------------


def test_every_feed_advertises_the_hub(roses: Roses) -> None:
    roses.write(range(2))
    hub = roses.url + HUB_PATH
    for fmt in ("rss", "atom", "json"):
        topic = f"{roses.url}/feeds/news.{fmt}"
        answer = roses.client.get(f"/feeds/news.{fmt}")
        assert answer.status_code == 200
        assert links(answer.headers["link"]) == {(hub, "hub"), (topic, "self")}
        if fmt == "json":
            doc = json.loads(answer.content)
            assert doc["hubs"] == [{"type": "WebSub", "url": hub}]
            assert doc["feed_url"] == topic
            continue
        root = etree.fromstring(answer.content)
        found = {(el.get("rel"), el.get("href")) for el in root.iter(f"{{{ATOM}}}link")}
        assert ("hub", hub) in found and ("self", topic) in found


def test_an_external_hub_is_advertised_and_pinged(tmp_path: Path) -> None:
    external = Subscriber()  # stands for a public hub: records the publish pings
    # the operator's choice: pinged even on 127.0.0.1, where no callback may be
    roses = Roses(tmp_path, websub=WebSubSettings(external_hub=external.url))
    try:
        answer = roses.client.get("/feeds/news.atom")
        assert (external.url, "hub") in links(answer.headers["link"])
        roses.write(range(1))
        assert roses.hub.drain(WAIT)
        pings = [parse_qs(d.body.decode()) for d in external.received()]
        assert sorted(p["hub.url"][0] for p in pings) == sorted(
            f"{roses.url}/feeds/news.{fmt}" for fmt in ("rss", "atom", "json")
        )
        assert all(p["hub.mode"] == ["publish"] for p in pings)
    finally:
        roses.close()
        external.close()


# -- subscription and distribution -----------------------------------------------------


@pytest.mark.parametrize("fmt", ["atom", "rss", "json"])
def test_subscribe_verify_and_receive_signed_content(
    roses: Roses, subscriber: Subscriber, fmt: str
) -> None:
    topic = f"{roses.url}/feeds/news.{fmt}"
    roses.subscribe(topic, subscriber, lease_seconds="3600")
    [check] = subscriber.verifications
    assert check["hub.mode"] == "subscribe" and check["hub.topic"] == topic
    assert check["hub.lease_seconds"] == "3600" and len(check["hub.challenge"]) >= 16
    assert check["who"] == "me"  # the callback's own query is kept
    [sub] = roses.hub.table.all()
    assert (sub.topic, sub.callback, sub.lease_seconds) == (topic, subscriber.url, 3600)

    started = time.perf_counter()
    roses.write(range(3))
    got = one_delivery(subscriber)
    print(f"\nWebSub round trip ({fmt}): {(got.at - started) * 1000:.1f} ms")
    assert got.accepted
    expected = hmac.new(b"a secret of the subscriber", got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-hub-signature"] == f"sha256={expected}"
    # the same document as the topic URL serves, with its type and the WebSub links
    served = roses.client.get(f"/feeds/news.{fmt}")
    assert got.body == served.content
    assert got.headers["content-type"] == served.headers["content-type"]
    assert links(got.headers["link"]) == {(roses.url + HUB_PATH, "hub"), (topic, "self")}
    assert b"Story 2" in got.body
    assert roses.hub.drain(WAIT)
    assert subscriber.received() == []  # one change, one delivery

    roses.write(range(3, 4))  # the next change brings the new item
    assert b"Story 3" in one_delivery(subscriber).body


def test_a_split_feed_is_a_topic(roses: Roses, subscriber: Subscriber) -> None:
    roses.write(range(1), stream="topics", part="sport/é")
    roses.write(range(1), stream="topics", part="other")
    topic = f"{roses.url}/feeds/topics/sport%2F%C3%A9.rss"
    roses.subscribe(topic, subscriber)
    roses.write(range(5, 6), stream="topics", part="other")  # another feed: nothing
    roses.write(range(7, 8), stream="topics", part="sport/é")
    got = one_delivery(subscriber)
    assert got.accepted and b"Story 7" in got.body and b"Story 5" not in got.body
    assert roses.hub.drain(WAIT)
    assert subscriber.received() == []


def test_a_wrong_signature_is_refused(roses: Roses) -> None:
    # The hub signs with the secret given at subscription; this subscriber checks with
    # another one (as it would a forged delivery), refuses each try, and the hub gives up.
    sub = Subscriber(secret="what the subscriber expects")
    try:
        roses.subscribe(f"{roses.url}/feeds/news.atom", sub, secret="another secret")
        roses.write(range(1))
        assert roses.hub.drain(WAIT)
        tries = sub.received()
        assert len(tries) == roses.hub.deliveries.max_attempts
        assert not any(d.accepted for d in tries)
        assert all(d.headers["x-hub-signature"].startswith("sha256=") for d in tries)
        assert roses.hub.counters["failed"] == 1 and roses.hub.counters["delivered"] == 0
    finally:
        sub.close()


def test_no_secret_no_signature(roses: Roses) -> None:
    sub = Subscriber()
    try:
        roses.subscribe(f"{roses.url}/feeds/news.rss", sub)
        roses.write(range(1))
        got = one_delivery(sub)
        assert "x-hub-signature" not in got.headers and b"Story 0" in got.body
    finally:
        sub.close()


def test_signature_check() -> None:
    # RFC 4231, test case 2
    vector = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    body = b"what do ya want for nothing?"
    assert sign("Jefe", body) == f"sha256={vector}"
    assert signature_ok("Jefe", body, f"sha256={vector}")
    assert signature_ok("Jefe", body, f"SHA256={vector.upper()}")
    assert signature_ok("Jefe", body, sign("Jefe", body, "sha1"))
    assert not signature_ok("Jefe", body + b"!", f"sha256={vector}")
    assert not signature_ok("Jeff", body, f"sha256={vector}")
    assert not signature_ok("Jefe", body, vector)
    assert not signature_ok("Jefe", body, f"md5={vector}")
    assert not signature_ok("Jefe", body, None)


def test_unsubscribe_stops_deliveries(roses: Roses, subscriber: Subscriber) -> None:
    topic = f"{roses.url}/feeds/news.atom"
    roses.subscribe(topic, subscriber)
    roses.write(range(1))
    assert one_delivery(subscriber).accepted
    answer = roses.request("unsubscribe", topic, subscriber.url)
    assert answer.status_code == 202
    assert roses.hub.drain(WAIT)
    assert subscriber.verifications[-1]["hub.mode"] == "unsubscribe"
    assert "hub.lease_seconds" not in subscriber.verifications[-1]
    assert roses.hub.table.all() == []
    roses.write(range(1, 3))
    assert roses.hub.drain(WAIT)
    assert subscriber.received() == []


def test_unverified_intent_changes_nothing(roses: Roses) -> None:
    sub = Subscriber(echo=False)
    try:
        roses.subscribe(f"{roses.url}/feeds/news.atom", sub)
        assert len(sub.verifications) == 1
        assert roses.hub.table.all() == [] and roses.hub.counters["unverified"] == 1
        roses.write(range(1))
        assert roses.hub.drain(WAIT)
        assert sub.received() == []
    finally:
        sub.close()


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("{url}/feeds/hidden.atom", "a stream without publish"),
        ("{url}/feeds/nothing.atom", "no such stream"),
        ("{url}/feeds/news.html", "a page, not a feed"),
        ("{url}/feeds/news.atom?x=1", "a query"),
        ("{url}/feeds/topics/none.rss", "a split value not seen yet"),
        ("{url}/feeds/topics.rss", "a split stream has no feed of its own"),
        ("http://example.org/feeds/news.atom", "another site"),
        ("", "no topic"),
    ],
)
def test_a_topic_that_is_no_published_feed_is_refused(
    roses: Roses, subscriber: Subscriber, topic: str, why: str
) -> None:
    answer = roses.request("subscribe", topic.format(url=roses.url), subscriber.url)
    assert answer.status_code == 400, why
    assert "hub.topic" in answer.text
    assert roses.hub.drain(WAIT)
    assert subscriber.verifications == []


@pytest.mark.parametrize(
    ("form", "status"),
    [
        ({"hub.mode": "publish"}, 400),
        ({"hub.callback": "ftp://127.0.0.1/cb"}, 400),
        ({"hub.callback": "callback"}, 400),
        ({"hub.lease_seconds": "-5"}, 400),
        ({"hub.secret": "x" * 200}, 400),
    ],
)
def test_bad_requests_are_refused(
    roses: Roses, subscriber: Subscriber, form: dict[str, str], status: int
) -> None:
    good = {
        "hub.mode": "subscribe",
        "hub.topic": f"{roses.url}/feeds/news.atom",
        "hub.callback": subscriber.url,
    }
    answer = roses.client.post(HUB_PATH, data=good | form)
    assert answer.status_code == status
    assert roses.hub.drain(WAIT) and subscriber.verifications == []


def test_only_form_posts(roses: Roses, subscriber: Subscriber) -> None:
    topic = f"{roses.url}/feeds/news.atom"
    body = {"hub.mode": "subscribe", "hub.topic": topic, "hub.callback": subscriber.url}
    assert roses.client.post(HUB_PATH, json=body).status_code == 415
    assert roses.client.get(HUB_PATH).status_code == 405


# -- leases, failures, restarts --------------------------------------------------------


def test_lease_expires_unless_renewed(roses: Roses, subscriber: Subscriber) -> None:
    topic = f"{roses.url}/feeds/news.atom"
    roses.subscribe(topic, subscriber, lease_seconds=str(10 * LEASE))  # more than allowed
    assert subscriber.verifications[-1]["hub.lease_seconds"] == str(LEASE)
    roses.subscribe(topic, subscriber, lease_seconds="100")  # a renewal, shorter
    assert subscriber.verifications[-1]["hub.lease_seconds"] == "100"
    assert len(roses.hub.table.all()) == 1
    roses.clock.t += 50
    roses.write(range(1))
    assert one_delivery(subscriber).accepted
    roses.clock.t += 100  # the lease is over
    roses.write(range(1, 2))
    assert roses.hub.drain(WAIT)
    assert subscriber.received() == []
    roses.subscribe(topic, subscriber, lease_seconds="100")  # renewed
    roses.write(range(2, 3))
    assert b"Story 2" in one_delivery(subscriber).body
    assert roses.hub.table.purge(roses.clock.t + 101) == 1


def test_failed_deliveries_are_retried(roses: Roses, subscriber: Subscriber) -> None:
    roses.subscribe(f"{roses.url}/feeds/news.atom", subscriber)
    subscriber.fail_next = 2
    roses.write(range(1))
    assert roses.hub.drain(WAIT)
    tries = subscriber.received()
    assert [d.accepted for d in tries] == [False, False, True]
    assert len({d.body for d in tries}) == 1
    assert roses.hub.counters["retries"] == 2 and roses.hub.counters["delivered"] == 1


def test_gone_ends_the_subscription(roses: Roses, subscriber: Subscriber) -> None:
    roses.subscribe(f"{roses.url}/feeds/news.atom", subscriber)
    subscriber.status = 410
    roses.write(range(1))
    assert roses.hub.drain(WAIT)
    assert len(subscriber.received()) == 1
    assert roses.hub.table.all() == []


def test_a_subscription_survives_a_restart(tmp_path: Path, subscriber: Subscriber) -> None:
    first = Roses(tmp_path)
    port, topic = first.server.port, f"{first.url}/feeds/news.atom"
    first.subscribe(topic, subscriber)
    first.close()
    second = Roses(tmp_path, port=port)  # a new process over the same data folder
    try:
        assert [s.topic for s in second.hub.table.all()] == [topic]
        second.write(range(1))
        got = one_delivery(subscriber)
        assert got.accepted and b"Story 0" in got.body
        assert got.body == second.client.get("/feeds/news.atom").content
        assert len(subscriber.verifications) == 1  # no new verification was needed
    finally:
        second.close()
