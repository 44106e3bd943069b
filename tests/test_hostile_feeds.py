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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from raw_http_support import RawReply, RawServer

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.poller import Poller
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
