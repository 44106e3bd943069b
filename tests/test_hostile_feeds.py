"""The hostile-feed suite: each ``tests/data/hostile/NAME.http`` is what a server sends,
byte for byte (status line, headers, body), next to ``NAME.expected.json``, what ROSES
must make of it.  A raw server on 127.0.0.1 sends it (``{{SERVER}}`` becomes the
server's own address, ``{{DATA}}`` the path of ``tests/data``: such files have no
Content-Length; ``serve.dribble`` sends it one byte at a time, then forever)
and a real :class:`Poller` polls it: fetch, decode, parse, xml-ize, sink, state.

``NAME.expected.json``::

    why               what the case is
    outcome           "ok" (the poll delivers items) or "refused" (an error, counted)
    error_contains    refused: the error message says this
    items, titles     ok: how many items reach the sink, and their titles
    message_contains  ok: the poll's message says this
    absent            no item (nor an error message) contains any of these strings
    max_item_chars    ok: no item is longer (no entity was expanded)
    never_requested   paths the server must never have been asked for
    serve             {"dribble": seconds between bytes}

The suite polls with ``fetch: {timeout: 1s, max_bytes: 16KB}``.  Also here: sources
whose servers dribble their headers do not keep the scheduler from polling the others.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from raw_http_support import RawReply, RawServer
from test_connector_support import rss

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Poller
from roses_app.connectors.scheduler import FeedScheduler
from roses_app.connectors.state import StateStore
from roses_app.items import parse_item

DATA = Path(__file__).resolve().parent / "data" / "hostile"
CASES = sorted(p.stem for p in DATA.glob("*.http"))
SETTINGS = FetchSettings(timeout_seconds=1.0, max_bytes=16 * 1024, max_backoff_seconds=600.0)


class Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: dict[str, list[str]] = {}

    def __call__(self, source: str, items: list[tuple[str, int | None]]) -> None:
        with self.lock:
            self.items.setdefault(source, []).extend(xml for xml, _ in items)


@dataclass
class Rig:
    store: StateStore
    sink: Sink
    poller: Poller


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    store = StateStore(tmp_path / "state.sqlite")
    sink = Sink()
    poller = Poller(store, SETTINGS, time.time, sink)
    yield Rig(store, sink, poller)
    poller.close()
    store.close()


def serve(server: RawServer, name: str) -> dict[str, Any]:
    expected: dict[str, Any] = json.loads((DATA / f"{name}.expected.json").read_text("utf-8"))
    data = (DATA / f"{name}.http").read_bytes()
    data = data.replace(b"{{SERVER}}", server.url("").encode())
    data = data.replace(b"{{DATA}}", str(DATA.parent).encode())
    dribble = expected.get("serve", {}).get("dribble")
    server.routes[f"/{name}"] = RawReply(data, dribble=dribble)
    return expected


def test_every_case_has_its_expected_outcome():
    expected = sorted(p.name.removesuffix(".expected.json") for p in DATA.glob("*.expected.json"))
    assert expected == CASES
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", CASES)
def test_hostile_feed(raw_server: RawServer, rig: Rig, name: str, caplog):
    expected = serve(raw_server, name)
    source = FeedSource(name, raw_server.url(f"/{name}"), 600.0)
    with caplog.at_level(logging.WARNING, logger="roses_app.connectors"):
        result = rig.poller.poll(source)
    items = rig.sink.items.get(name, [])
    state = rig.store.get(name)
    assert state is not None and state.n_polls == 1
    if expected["outcome"] == "refused":
        assert result.status == "error", result
        assert expected["error_contains"] in result.message
        assert items == []
        assert state.n_errors == 1 and state.failures == 1 and state.next_allowed_at > 0
        assert state.last_error == result.message
        logged = [r.getMessage() for r in caplog.records]
        assert any(name in line and result.message in line for line in logged)
    else:
        assert expected["outcome"] == "ok"
        assert result.status == "ok", result
        assert result.n_items == len(items) == expected["items"]
        assert state.n_errors == 0 and state.n_items == expected["items"]
        titles = [parse_item(xml).findtext("title") for xml in items]
        assert titles == expected.get("titles", titles)
        assert expected.get("message_contains", "") in result.message
        for xml in items:
            assert len(xml) <= expected.get("max_item_chars", len(xml))
    for text in expected.get("absent", []):
        assert all(text not in xml for xml in items) and text not in result.message
    for path in expected.get("never_requested", []):
        assert raw_server.hits(path) == 0, f"{path} was fetched"


# -- slow sources and the poll pool ---------------------------------------------------------


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_dribbling_sources_never_starve_the_others(raw_server: RawServer, tmp_path: Path):
    """As many dribbling sources as the main pool has workers, polled again and again,
    and fast sources on a short interval: the fast ones are polled while the slow
    ones hang, each slow fetch ends at its deadline and is counted for its source."""
    slow_names = ["slow1", "slow2"]
    for name in slow_names:
        raw_server.routes[f"/{name}"] = RawReply(b"HTTP/1.1 200 OK\r\nX-Slow: ", dribble=0.2)
    body = rss(("a", "A"))
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    raw_server.routes["/fast"] = RawReply(head.encode() + body)
    settings = FetchSettings(timeout_seconds=1.5, max_backoff_seconds=0.2)
    store = StateStore(tmp_path / "state.sqlite")
    poller = Poller(store, settings, time.time, Sink())
    sources = [FeedSource(n, raw_server.url(f"/{n}"), 0.2) for n in slow_names]
    sources += [FeedSource(f"fast{i}", raw_server.url("/fast"), 0.2) for i in (1, 2)]
    scheduler = FeedScheduler(poller, sources, max_workers=2, slow_workers=2)
    scheduler.start()
    try:
        # the first round: the slow sources take both workers, until their deadline
        wait_for(lambda: all(_errors(store, n) >= 1 for n in slow_names))
        wait_for(lambda: scheduler.slow_sources == set(slow_names))  # each in the slow lane
        wait_for(lambda: _fast_poll_while_both_hang(raw_server, slow_names))
        wait_for(lambda: all(_errors(store, n) >= 3 for n in slow_names))
    finally:
        scheduler.shutdown(wait=True)
        poller.close()
    for name in slow_names:
        state = store.get(name)
        assert state is not None and state.n_ok == 0
        assert "did not finish within 1.5 s" in state.last_error
        assert scheduler.last_results[name][1].status in ("error", "skipped_backoff")
    for name in ("fast1", "fast2"):
        state = store.get(name)
        assert state is not None and state.n_errors == 0 and state.n_ok >= 2
    store.close()


def _errors(store: StateStore, name: str) -> int:
    state = store.get(name)
    return 0 if state is None else state.n_errors


def _fast_poll_while_both_hang(raw: RawServer, slow_names: list[str]) -> bool:
    """Some poll of a fast source happened while a fetch of every slow source hung.

    The server sees a dribbling connection close at once (it waits on the socket), and
    a margin of 0.1 s on each side keeps a worker freed at a deadline from counting."""
    now = time.monotonic()
    spans = [
        [(c.opened, c.closed if c.closed is not None else now) for c in raw.connections(f"/{n}")]
        for n in slow_names
    ]
    both: list[tuple[float, float]] = []
    for a_start, a_end in spans[0]:
        for b_start, b_end in spans[1]:
            start, end = max(a_start, b_start) + 0.1, min(a_end, b_end) - 0.1
            if start < end:
                both.append((start, end))
    fast = [c.opened for c in raw.connections("/fast")]
    return any(start <= t <= end for t in fast for start, end in both)
