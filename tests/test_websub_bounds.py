"""The WebSub hub under abuse, for real (the ROSES server and its hub, subscribers and
silent callbacks on 127.0.0.1): leases it cannot read or that are huge, callbacks on
private addresses (server-side request forgery), and bursts of callbacks that never
answer, which must cost only bounded slots for a bounded time."""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlencode

import pytest
from raw_http_support import RawReply, RawServer
from test_websub import LEASE, WAIT, Roses, Subscriber, one_delivery

from roses_app.config import parse_config
from roses_app.config.model import WebSubSettings
from roses_app.metrics import Metrics, Snapshot
from roses_app.publish import websub_client
from roses_app.publish.websub import HUB_PATH
from roses_app.publish.websub_client import callback_client, exchange, refusal
from roses_app.publish.websub_table import Subscription

GUARDED = WebSubSettings(lease_seconds=LEASE)  # the default: private callbacks refused
# short deadlines and small limits, so that the tests take seconds
TIGHT = WebSubSettings(
    lease_seconds=LEASE,
    allow_private_callbacks=True,
    timeout_seconds=0.3,
    concurrency=16,
    per_host=4,
    verify_queue=200,
)


class Blackhole:
    """A callback host that accepts connections and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=512)
        self.listener.settimeout(0.05)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._open = True
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while self._open:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.held.append(conn)
            self.accepted += 1

    def url(self, n: int) -> str:
        return f"http://127.0.0.1:{self.port}/silent/{n}"

    def release(self) -> None:
        """Close every connection held, and stop listening (once)."""
        if not self._open:
            return
        self._open = False
        self.thread.join()
        self.listener.close()
        for conn in self.held:
            conn.close()


def tcp_states(port: int) -> Counter[str]:
    """States of this machine's TCP connections to 127.0.0.1:``port`` (their client
    side), from /proc/net/tcp: CLOSE_WAIT is a connection its peer closed and its
    owner did not."""
    names = {"01": "ESTABLISHED", "02": "SYN_SENT", "06": "TIME_WAIT", "08": "CLOSE_WAIT"}
    if not Path("/proc/net/tcp").exists():
        # Linux's, as everything ROSES runs on: without it "no CLOSE_WAIT" would prove nothing
        pytest.fail("no /proc/net/tcp here to read connection states from")
    states: Counter[str] = Counter()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for line in table.read_text().splitlines()[1:] if table.exists() else []:
            fields = line.split()
            if int(fields[2].rpartition(":")[2], 16) == port:
                states[names.get(fields[3], fields[3])] += 1
    return states


@pytest.fixture
def subscriber() -> Iterator[Subscriber]:
    s = Subscriber(secret="a secret of the subscriber")
    yield s
    s.close()


def subscribe_form(roses: Roses, callback: str, **extra: str) -> dict[str, str]:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{roses.url}/feeds/news.atom",
        "hub.callback": callback,
    }
    return form | {f"hub.{k}": v for k, v in extra.items()}


def wait_for(check: Callable[[], object], seconds: float) -> float:
    """Seconds until ``check()`` is true; fails after ``seconds``."""
    started = time.perf_counter()
    while not check():
        assert time.perf_counter() - started < seconds, f"not within {seconds} s"
        time.sleep(0.01)
    return time.perf_counter() - started


# -- leases ----------------------------------------------------------------------------


@pytest.fixture
def roses(tmp_path: Path) -> Iterator[Roses]:
    r = Roses(tmp_path)
    yield r
    r.close()


@pytest.mark.parametrize(
    ("lease", "why"),
    [
        ("²", "a superscript two: str.isdigit says yes, int() says no"),
        ("١٢٣", "Arabic-Indic digits"),
        ("12.5", "not whole"),
        ("1e5", "an exponent"),
        ("-5", "negative"),
        ("+5", "a sign"),
        ("12 34", "two numbers"),
        ("0", "zero"),
        ("000", "zero, longer"),
        ("9" * 5000, "5,000 digits (int() refuses more than 4,300)"),
        ("1" + "0" * 30, "31 digits"),
        ("00000000100", "11 digits, most of them zeros"),
        ("1_000", "an underscore, which int() takes"),
    ],
)
def test_a_malformed_lease_is_refused(
    roses: Roses, subscriber: Subscriber, lease: str, why: str
) -> None:
    answer = roses.client.post(
        HUB_PATH, data=subscribe_form(roses, subscriber.url, lease_seconds=lease)
    )
    assert answer.status_code == 400, why
    assert answer.text.startswith("hub.lease_seconds must be"), answer.text
    assert len(lease) < 4 or lease not in answer.text  # what was sent is not echoed
    assert roses.hub.drain(WAIT) and subscriber.verifications == []


@pytest.mark.parametrize(
    ("lease", "granted"),
    [
        ("9" * 10, LEASE),
        (str(LEASE + 1), LEASE),
        ("0000000100", 100),
    ],
)
def test_a_long_lease_is_cut_to_the_longest(
    roses: Roses, subscriber: Subscriber, lease: str, granted: int
) -> None:
    roses.subscribe(f"{roses.url}/feeds/news.atom", subscriber, lease_seconds=lease)
    assert subscriber.verifications[-1]["hub.lease_seconds"] == str(granted)
    [sub] = roses.hub.table.all()
    assert sub.lease_seconds == granted


# -- callbacks on private addresses ----------------------------------------------------


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Roses]:
    r = Roses(tmp_path, websub=GUARDED)
    yield r
    r.close()


@pytest.mark.parametrize(
    ("callback", "kind"),
    [
        ("http://127.0.0.1:{port}/cb", "loopback"),
        ("http://localhost:{port}/cb", "loopback"),
        ("http://[::1]:{port}/cb", "loopback"),
        ("http://[::ffff:127.0.0.1]:{port}/cb", "loopback"),
        ("http://2130706433:{port}/cb", "loopback"),  # 127.0.0.1 as one number
        ("http://0.0.0.0:{port}/cb", "unspecified"),
        ("http://10.1.2.3/cb", "private"),
        ("https://192.168.0.10/cb", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/cb", "link-local"),
        ("http://224.0.0.1/cb", "multicast"),
        ("http://100.64.0.1/cb", "not globally routable"),  # carrier-grade NAT
    ],
)
def test_a_private_callback_is_refused(
    guarded: Roses, subscriber: Subscriber, callback: str, kind: str
) -> None:
    port = subscriber.server.server_address[1]
    url = callback.format(port=port)
    answer = guarded.client.post(HUB_PATH, data=subscribe_form(guarded, url))
    assert answer.status_code == 400, answer.text
    assert f"is a {kind} address" in answer.text
    assert "allow_private_callbacks: true" in answer.text
    assert guarded.hub.drain(WAIT)
    assert subscriber.verifications == [] and guarded.hub.table.all() == []
    assert guarded.hub.counters["refused"] == 1


def test_a_callback_that_turned_private_is_not_called(
    guarded: Roses, subscriber: Subscriber
) -> None:
    # Recorded as if its name had resolved to a public address at subscription and
    # resolves to 127.0.0.1 now (DNS rebinding): the check made at connect time stops it.
    now = guarded.clock()
    topic = f"{guarded.url}/feeds/news.atom"
    guarded.hub.table.upsert(
        Subscription(topic, subscriber.url, None, LEASE, now + LEASE, "news", "", guarded.url, now)
    )
    guarded.write(range(1))
    assert guarded.hub.drain(WAIT)
    assert subscriber.received() == []
    counters = guarded.hub.counters
    assert (counters["callbacks_refused"], counters["failed"], counters["retries"]) == (1, 1, 0)


def test_the_guard_checks_every_connection(
    subscriber: Subscriber, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = subscriber.url.replace("127.0.0.1", "localhost") + "&hub.challenge=x"

    async def get() -> websub_client.Answer:
        async with callback_client(connections=2, keepalive=0, deadline=5, guarded=True) as c:
            return await exchange(c, "GET", url, 5)

    refused = asyncio.run(get())
    assert refused.refused and refused.status is None and "loopback" in refused.error
    assert subscriber.verifications == []

    checked: list[str] = []  # an address policy that lets loopback through, for once
    monkeypatch.setattr(websub_client, "refusal", lambda a: checked.append(a))
    answered = asyncio.run(get())
    assert (answered.status, answered.body) == (200, b"x")
    assert "127.0.0.1" in checked and len(subscriber.verifications) == 1


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
        ("127.0.0.53", "loopback"),
        ("::", "unspecified"),
        ("::ffff:10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("fc00::1", "private"),
        ("169.254.0.1", "link-local"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "private"),  # documentation (TEST-NET-1)
    ],
)
def test_address_policy(address: str, why: str | None) -> None:
    assert refusal(address) == why


def test_the_hub_settings_are_read(tmp_path: Path) -> None:
    text = (
        "settings:\n  websub: {allow_private_callbacks: true, timeout: 2s, concurrency: 8,\n"
        "           per_host: 2, verify_queue: 30}\nsources: {}\nstreams: {}\n"
    )
    got = parse_config(text, tmp_path / "feeds.yaml").settings.websub
    assert got == replace(
        WebSubSettings(),
        allow_private_callbacks=True,
        timeout_seconds=2.0,
        concurrency=8,
        per_host=2,
        verify_queue=30,
    )


# -- bursts of callbacks that never answer ---------------------------------------------


@dataclass
class Answer:
    status: int
    text: str
    retry_after: str | None


def burst(port: int, forms: list[dict[str, str]], connections: int = 4) -> list[Answer]:
    """POST ``forms`` to the hub over a few kept-alive connections at once (http.client:
    httpx's client would cost more time than the server it tests)."""
    answers: list[Answer] = []

    def send(share: list[dict[str, str]]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        try:
            for form in share:
                conn.request("POST", HUB_PATH, urlencode(form), headers)
                got = conn.getresponse()
                text = got.read().decode()
                answers.append(Answer(got.status, text, got.getheader("Retry-After")))
        finally:
            conn.close()

    threads = [
        threading.Thread(target=send, args=(forms[n::connections],)) for n in range(connections)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == len(forms)
    return answers


def test_a_dribbling_callback_costs_one_deadline(tmp_path: Path, raw_server: RawServer) -> None:
    # an answer that comes one byte every 50 ms, for ever: no single read waits long,
    # only the deadline of the whole call ends it
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n"
    raw_server.routes["/drip"] = RawReply(head, dribble=0.05)
    roses = Roses(tmp_path, websub=TIGHT)
    try:
        started = time.perf_counter()
        answer = roses.client.post(HUB_PATH, data=subscribe_form(roses, raw_server.url("/drip")))
        assert answer.status_code == 202, answer.text
        assert roses.hub.drain(WAIT)
        took = time.perf_counter() - started
        assert roses.hub.counters["unverified"] == 1 and roses.hub.table.all() == []
        [call] = raw_server.closed("/drip", timeout=2.0)  # the hub hung up
        assert call.closed is not None
        print(f"\ndribbling callback: hung up after {call.closed - call.opened:.2f} s")
        assert call.closed - call.opened < TIGHT.timeout_seconds + 0.5
        assert took < TIGHT.timeout_seconds + 1.0
    finally:
        roses.close()


def test_the_verification_queue_is_bounded(tmp_path: Path) -> None:
    hole = Blackhole()
    tight = replace(TIGHT, verify_queue=10, per_host=16, concurrency=2)
    roses = Roses(tmp_path, websub=tight)
    try:
        answers = burst(roses.server.port, [subscribe_form(roses, hole.url(n)) for n in range(60)])
        accepted = [a for a in answers if a.status == 202]
        busy = [a for a in answers if a.status == 503]
        assert len(accepted) >= 10 and len(accepted) + len(busy) == 60
        assert all("subscription requests wait for verification" in a.text for a in busy)
        assert {a.retry_after for a in busy} == {"1"}  # a deadline (0.3 s), in whole seconds
        assert roses.hub.stats()["verifications_waiting"] <= 10
        assert roses.hub.counters["busy"] == len(busy)
        scrape = Metrics(lambda: Snapshot(websub=roses.hub.stats())).exposition()[0].decode()
        assert f'roses_websub_events_total{{event="busy"}} {len(busy)}.0' in scrape
        assert "roses_websub_verifications_waiting " in scrape
    finally:
        roses.close()
        hole.release()


def test_silent_callbacks_do_not_stop_verification(
    tmp_path: Path, subscriber: Subscriber, caplog: pytest.LogCaptureFixture
) -> None:
    hole = Blackhole()
    roses = Roses(tmp_path, websub=TIGHT)
    try:
        started = time.perf_counter()
        forms = [subscribe_form(roses, hole.url(n)) for n in range(2000)]
        answers = burst(roses.server.port, forms)
        took = time.perf_counter() - started
        statuses = Counter(a.status for a in answers)
        print(f"\n2,000 silent subscriptions in {took:.1f} s: {dict(statuses)}")
        assert set(statuses) == {202, 503}
        busy = [a for a in answers if a.status == 503]
        assert all(int(a.retry_after or 0) >= 1 and "retry after" in a.text for a in busy)
        assert roses.hub.stats()["verifications_waiting"] <= roses.hub.host_queue
        assert hole.accepted > 0  # the hub did call them
        in_flight = tcp_states(hole.port)
        assert in_flight["ESTABLISHED"] + in_flight["CLOSE_WAIT"] <= TIGHT.per_host

        # a subscriber on another host is verified, and gets content, at once
        callback = subscriber.url.replace("127.0.0.1", "localhost")
        asked = time.perf_counter()
        form = subscribe_form(roses, callback, secret="a secret of the subscriber")
        answer = roses.client.post(HUB_PATH, data=form)
        assert answer.status_code == 202, answer.text
        verified = wait_for(lambda: roses.hub.table.all(), 3.0)
        roses.write(range(1))
        got = one_delivery(subscriber)
        print(f"verified in {verified:.2f} s, delivered {got.at - asked:.2f} s after asking")
        assert got.accepted and b"Story 0" in got.body

        # stopped with verifications in flight (the silent ones still hold theirs)
        assert roses.hub.stats()["pending"] > 0
        stopping = time.perf_counter()
        roses.hub.stop(grace=0.2)
        stopped = time.perf_counter() - stopping
        hole.release()  # the silent peers hang up: no end of the hub's may be left open
        closing = wait_for(lambda: tcp_states(hole.port)["CLOSE_WAIT"] == 0, 2.0)
        print(f"stopped in {stopped:.2f} s; no CLOSE_WAIT {closing:.2f} s after the peers closed")
        assert stopped < 2.0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        roses.close()
        hole.release()


def test_silent_subscribers_do_not_hold_up_deliveries(
    tmp_path: Path, subscriber: Subscriber, caplog: pytest.LogCaptureFixture
) -> None:
    hole = Blackhole()
    roses = Roses(tmp_path, websub=TIGHT)
    try:
        # verified long ago, silent since
        now = roses.clock()
        topic = f"{roses.url}/feeds/news.atom"
        for n in range(1000):
            silent = Subscription(
                topic, hole.url(n), None, LEASE, now + LEASE, "news", "", roses.url, now
            )
            roses.hub.table.upsert(silent)
        callback = subscriber.url.replace("127.0.0.1", "localhost")  # a host of its own
        form = subscribe_form(roses, callback, secret="a secret of the subscriber")
        answer = roses.client.post(HUB_PATH, data=form)
        assert answer.status_code == 202 and roses.hub.drain(WAIT)
        for n in range(3):  # the first change, and the next ones while the silent retry
            started = time.perf_counter()
            roses.write(range(n, n + 1))
            got = one_delivery(subscriber)
            print(f"\nchange {n}: delivered in {got.at - started:.2f} s past 1,000 silent")
            assert got.accepted and f"Story {n}".encode() in got.body
            assert got.at - started < 2.0
        in_flight = tcp_states(hole.port)
        assert in_flight["ESTABLISHED"] + in_flight["CLOSE_WAIT"] <= TIGHT.per_host

        hole.release()  # the silent peers hang up while the hub runs: it closes its ends
        closing = wait_for(lambda: tcp_states(hole.port)["CLOSE_WAIT"] == 0, 2.0)
        print(f"no CLOSE_WAIT {closing:.2f} s after the peers closed")
        stopping = time.perf_counter()
        pending = roses.hub.stats()["pending"]
        roses.hub.stop(grace=0.2)
        stopped = time.perf_counter() - stopping
        print(f"stopped in {stopped:.2f} s with {pending} deliveries pending")
        assert pending > 100 and stopped < 2.0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    finally:
        roses.close()
        hole.release()
