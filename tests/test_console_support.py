"""A console over a small config, with fakes for the editor's engine functions."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from roses_app.config import parse_config
from roses_app.config.console import hash_password
from roses_app.config.model import Config, FeedSource
from roses_app.connectors.listing import Live, Snapshot, one, rows_of
from roses_app.connectors.poller import PollResult
from roses_app.connectors.refresh import Interval
from roses_app.connectors.state import SourceState, StateStore
from roses_app.errors import ConfigError, ConfigProblem
from roses_app.items import Event
from roses_app.publish.console import ConsoleDeps, PollHistory, PreviewAsk
from roses_app.publish.console.recent import recent_items
from roses_app.publish.console.streampages import explain_stream
from roses_app.publish.server import create_app
from roses_app.spoolfiles import write_events
from roses_app.store import Store

PASSWORD = "correct horse battery"
HASH = hash_password(PASSWORD, n=16)  # cheap for tests; the CLI's default is 2^15
ORIGIN = "http://127.0.0.1:8080"
NOW = time.time()

CONFIG = """\
settings:
  data_dir: data
  http: {{host: {host}, port: 8080}}
{console}
sources:
  guardian: {{feed: "https://example.org/world.rss", every: 10m}}
  bigpicture: {{feed: "https://example.org/bigpicture.xml"}}
streams:
  volcano:
    filter: {{from: guardian, where: "contains(lower-case(title), 'volcano')"}}
    publish: {{title: "Iceland volcano"}}
  topics:
    split: {{from: guardian, by: "if (contains(title, 'football')) then 'sport' else 'other'"}}
    publish: true
  headlines:
    map: {{from: volcano, xpath: "title, link, guid"}}
"""


def write_config(tmp_path: Path, *, console: str | None = None, host: str = "127.0.0.1") -> Config:
    if console is None:
        console = f"  console: {{password_hash: '{HASH}'}}"
    text = CONFIG.format(host=host, console=console)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "feeds.yaml"
    path.write_text(text, encoding="utf-8")
    return parse_config(text, path)


@dataclass
class FakeResult:
    """The interface of roses_app.publish.preview.PreviewResult."""

    ask: PreviewAsk

    def to_json(self) -> dict[str, Any]:
        if "((" in self.ask.text:
            return {"problems": [{"message": "XPath syntax error", "line": 1, "column": 3}],
                    "items": [], "matched": 0, "scanned": 0, "per_source": {},
                    "split_values": {}, "seconds": 0.01}  # fmt: skip
        return {
            "problems": [],
            "items": [
                {
                    "source": "guardian",
                    "title": "Volcano <b>erupts</b>",
                    "link": "https://example.org/v",
                    "published": None,
                    "part": None,
                    "xml": "<item/>",
                }
            ],
            "matched": 1,
            "scanned": 3,
            "per_source": {"guardian": 1},
            "split_values": {},
            "seconds": 0.01,
        }


@dataclass
class FakeEngine:
    """Records what the console asked of the editor's functions."""

    previews: list[PreviewAsk] = field(default_factory=list)
    applied: list[tuple[Path, str, str | None]] = field(default_factory=list)
    reloads: list[str] = field(default_factory=list)

    def preview(self, ask: PreviewAsk) -> FakeResult:
        self.previews.append(ask)
        return FakeResult(ask)

    def apply(self, path: Path, name: str, body: str | None) -> Any:
        if body is not None and "bad" in body:
            raise ConfigError([ConfigProblem(str(path), 7, "unknown source 'bad'")])
        self.applied.append((path, name, body))
        return _Applied(path, path.with_suffix(".yaml.bak"), name, body is None)

    def reload(self, reason: str) -> Any:
        self.reloads.append(reason)
        return _Reloaded(started=("x",), stopped=())


@dataclass(frozen=True)
class _Applied:
    path: Path
    backup: Path
    stream: str
    removed: bool


@dataclass(frozen=True)
class _Reloaded:
    started: tuple[str, ...]
    stopped: tuple[str, ...]


@dataclass
class Env:
    config: Config
    deps: ConsoleDeps
    engine: FakeEngine
    client: TestClient
    store: Store
    history: PollHistory
    current: list[Config]  # what deps.config() returns: [0] (a test's reload swaps it)


LIVE = Live(lambda name: NOW + 300.0, {"guardian": Interval(600.0, "every: 10m")}, lambda n: 0.2)


def make_env(tmp_path: Path, config: Config, *, client: str = "127.0.0.1") -> Env:
    data = config.settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    states = StateStore(data / "sources.sqlite")
    url = "https://example.org/world.rss"
    error = "HTTP 503 Service Unavailable"
    states.put_many([SourceState("guardian", url, url, last_status="error", last_error=error,
                                 last_attempt_at=NOW - 60, n_polls=4, n_not_modified=1,
                                 failures=1, rate_items=3.0, rate_seconds=86400.0)])  # fmt: skip
    feeds = {n: s for n, s in config.sources.items() if isinstance(s, FeedSource)}
    history = PollHistory(data / "poll_history.sqlite")
    history.record(PollResult("guardian", "error", 0, error, fetch_seconds=0.3, lag_seconds=0.1,
                              interval_seconds=600.0))  # fmt: skip
    history.record(PollResult("guardian", "ok", 2, "2 new", fetch_seconds=0.2))
    store = Store(data / "store.sqlite")
    store.write_batch("q", 0, [("volcano", "", int(NOW * 1e6), 1,
                                "<item><title>Volcano wakes</title><link>https://example.org/v1"
                                "</link><guid>v1</guid></item>")])  # fmt: skip
    spool = data / "spool"
    write_events(spool / "log" / "00000001.jsonl", [
        Event("guardian", int(NOW * 1e6), 1, "<item><title>World news</title>"
              "<link>https://example.org/w1</link></item>"),
        Event("bigpicture", int(NOW * 1e6), 2, "<item><title>Pictures</title></item>"),
    ])  # fmt: skip
    engine = FakeEngine()
    current = [config]
    deps = ConsoleDeps(
        settings=_console(config),
        config=lambda: current[0],
        data_dir=data,
        store=store,
        sources=Snapshot(lambda: rows_of(states, feeds, LIVE), max_age=0.0),
        source=lambda name: one(states, feeds[name], LIVE) if name in feeds else None,
        history=history,
        recent=lambda name, n: recent_items(spool, name, n),
        queries=lambda: {"volcano": "stateless", "topics": "stateless", "headlines": "g1"},
        counters=lambda: {
            "dropped": {"volcano/filter": 2},
            "late": {"topics": 1, "volcano": 4},
            "revised": {"volcano": 5},
            "unchanged": {"volcano": 6},
            "watermark": {"stateless": 3},
        },
        explain=lambda name: explain_stream(config, name),
        preview=engine.preview,
        apply=engine.apply,
        reload=engine.reload,
    )
    app = create_app(config, store, lambda: {"ok": True}, console=deps)
    test_client = TestClient(app, base_url=ORIGIN, client=(client, 50000))
    return Env(config, deps, engine, test_client, store, history, current)


def _console(config: Config) -> Any:
    assert config.settings.console is not None
    return config.settings.console


def login(client: TestClient, password: str = PASSWORD, **headers: str) -> Any:
    return client.post(
        "/console/login",
        data={"password": password},
        headers={"Origin": ORIGIN, **headers},
        follow_redirects=False,
    )


def csrf_of(html: str) -> str:
    start = html.index('name="csrf-token" content="') + len('name="csrf-token" content="')
    return html[start : html.index('"', start)]


def indent(text: str) -> str:
    return textwrap.indent(text, "  ")


def post_form(client: TestClient, path: str, fields: Mapping[str, str], **headers: str) -> Any:
    return client.post(path, data=dict(fields), headers={"Origin": ORIGIN, **headers},
                       follow_redirects=False)  # fmt: skip
