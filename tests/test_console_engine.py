"""The console's preview and apply endpoints with the engine's real functions: the
reference engine over the spool's items, and feeds.yaml changed on disk."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_console_support import ORIGIN, Env, csrf_of, login, make_env, post_form, write_config

from roses_app.config import load_config
from roses_app.config.edit import apply_stream
from roses_app.publish.console import PreviewAsk
from roses_app.publish.preview import Previewer, PreviewRequest, PreviewResult
from roses_app.publish.server import create_app


@pytest.fixture
def real(tmp_path: Path) -> Env:
    env = make_env(tmp_path, write_config(tmp_path))
    config = env.config
    previewer = Previewer(lambda: config, config.settings.data_dir / "spool")

    def preview(ask: PreviewAsk) -> PreviewResult:
        return previewer.preview(PreviewRequest(**asdict(ask)))

    deps = dataclasses.replace(env.deps, preview=preview, apply=apply_stream)
    app = create_app(config, env.store, lambda: {"ok": True}, console=deps)
    client = TestClient(app, base_url=ORIGIN, client=("127.0.0.1", 50000))
    assert login(client).status_code == 303
    return dataclasses.replace(env, deps=deps, client=client)


def test_real_preview(real: Env):
    csrf = csrf_of(real.client.get("/console/editor").text)
    headers = {"Origin": ORIGIN, "X-CSRF-Token": csrf}
    ask = {"text": "contains(title, 'World')", "kind": "where", "source": "guardian"}
    answer = real.client.post("/console/preview", json=ask, headers=headers)
    assert answer.status_code == 200
    data = answer.json()
    assert data["matched"] == 1 and data["items"][0]["title"] == "World news"
    assert data["per_source"] == {"guardian": 1}
    wrong = real.client.post(
        "/console/preview", json={**ask, "text": "contains(title,"}, headers=headers
    ).json()
    assert wrong["problems"] and wrong["problems"][0]["line"] == 1 and wrong["items"] == []


def test_real_apply_changes_feeds_yaml(real: Env):
    path = real.config.path
    before = path.read_text()
    csrf = csrf_of(real.client.get("/console/editor").text)
    fields = {"csrf": csrf, "name": "quake", "kind": "where", "source": "guardian",
              "text": "contains(title, 'quake')", "publish": "on"}  # fmt: skip
    done = post_form(real.client, "/console/apply", fields)
    assert done.status_code == 200 and "Applied quake" in done.text
    config = load_config(path)
    assert "quake" in config.streams and config.streams["quake"].published
    assert path.read_text().startswith(before.split("streams:")[0])  # the rest kept
    assert len(real.engine.reloads) == 1
    refused = post_form(real.client, "/console/apply", {**fields, "source": "nowhere"})
    assert refused.status_code == 422 and "feeds.yaml:" in refused.text
    assert "nowhere" in refused.text and load_config(path).streams.keys() == config.streams.keys()


def test_the_daemon_wires_the_console(tmp_path: Path):
    from roses_app.connectors.poller import PollResult
    from roses_app.daemon import Daemon
    from roses_app.daemon_console import daemon_console

    daemon = Daemon(write_config(tmp_path))
    try:
        assert daemon.history is not None
        daemon._on_poll(PollResult("guardian", "error", 0, "HTTP 404 Not Found"))
        assert [p.message for p in daemon.history.recent("guardian")] == ["HTTP 404 Not Found"]
        deps = daemon_console(daemon, daemon.history, daemon.reload, daemon.clock)
        assert deps is not None and deps.reload is not None and deps.preview is not None
        # two sources: each page reads them afresh (last and next poll as they are now)
        assert deps.sources.max_age == 0.0  # type: ignore[attr-defined]
        app = create_app(daemon.config, daemon.store, daemon.health, console=deps)
        client = TestClient(app, base_url=ORIGIN, client=("127.0.0.1", 50000))
        assert login(client).status_code == 303
        source = client.get("/console/sources/guardian")
        assert source.status_code == 200 and "HTTP 404 Not Found" in source.text
        assert client.get("/console/streams/volcano").status_code == 200
        assert "2 source(s) match." in client.get("/console/sources").text
    finally:
        daemon.close()
    off = Daemon(write_config(tmp_path / "off", console=""))
    try:
        assert off.history is None
    finally:
        off.close()
