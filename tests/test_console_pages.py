"""The console's pages over a small config, its preview and apply endpoints (with
fakes of the engine's functions), and the plan's picture small and summarised."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from test_console_support import (
    ORIGIN,
    Env,
    csrf_of,
    login,
    make_env,
    post_form,
    write_config,
)

from roses_app.algebra.plan.operators import Filter, Source
from roses_app.config import parse_config
from roses_app.config.model import Config, FeedSource, Settings, SourceConfig, StreamConfig
from roses_app.publish.console.chart import hourly_svg
from roses_app.publish.console.plansvg import plan_svg

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    env = make_env(tmp_path, write_config(tmp_path))
    assert login(env.client).status_code == 303
    return env


def _plain(html: str) -> None:
    """No inline script or style attribute the policy would block."""
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert " style=" not in html and "<style" not in html and " on" + "click=" not in html


def test_overview_and_static_files(env: Env):
    page = env.client.get("/console/")
    assert page.status_code == 200
    assert "2 streams" not in page.text and "3</a> (2 published)" in page.text
    assert "1 error" in page.text and "1 never" in page.text
    _plain(page.text)
    css = env.client.get("/console/static/console.css")
    js = env.client.get("/console/static/console.js")
    assert css.headers["content-type"].startswith("text/css") and "@media" in css.text
    assert js.headers["content-type"].startswith("text/javascript") and "X-CSRF-Token" in js.text
    assert env.client.get("/console/static/other.js").status_code == 404


def test_sources_listing_filter_sort_and_page(env: Env):
    page = env.client.get("/console/sources")
    assert page.status_code == 200 and "2 source(s) match." in page.text
    assert (
        "HTTP 503 Service Unavailable" in page.text
        and 'href="/console/sources/guardian"' in page.text
    )
    errors = env.client.get("/console/sources", params={"status": "error"})
    assert "1 source(s) match." in errors.text and "bigpicture</a>" not in errors.text
    by_name = env.client.get("/console/sources", params={"sort": "-name", "per_page": "1"})
    assert "bigpicture</a>" not in by_name.text and "guardian</a>" in by_name.text
    assert "page 1 of 2" in by_name.text and 'rel="next"' in by_name.text
    bad = env.client.get("/console/sources", params={"sort": "colour"})
    assert bad.status_code == 400 and "sort must be one of" in bad.text
    _plain(page.text)


def test_a_source_page(env: Env):
    page = env.client.get("/console/sources/guardian")
    assert page.status_code == 200
    assert 'id="source-health"' in page.text and "every: 10m" in page.text
    history = page.text[page.text.index('id="poll-history"') :]
    assert history.index(">ok<") < history.index(">error<")  # newest first
    assert "HTTP 503 Service Unavailable" in history
    assert 'href="https://example.org/w1"' in page.text and "World news" in page.text
    assert "Pictures" not in page.text  # another source's item
    assert env.client.get("/console/sources/nothing").status_code == 404


def test_streams_page_with_the_plan(env: Env):
    page = env.client.get("/console/streams")
    assert page.status_code == 200 and "3 stream(s) match." in page.text
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="plan-svg"' in page.text
    only = env.client.get("/console/streams", params={"q": "volc"})
    assert "1 stream(s) match." in only.text
    reading = env.client.get("/console/streams", params={"source": "guardian"})
    assert "3 stream(s) match." in reading.text  # headlines reads it through volcano
    _plain(page.text)


def test_a_stream_page(env: Env):
    page = env.client.get("/console/streams/volcano")
    assert page.status_code == 200
    text = page.text
    assert 'id="stream-query">stateless<' in text
    assert f"{env.config.path}:9<" in text  # the definition's file:line
    definition = text[text.index('id="stream-definition">') :]
    assert (
        "volcano:" in definition and "publish: {title: &quot;Iceland volcano&quot;}" in definition
    )
    assert "== logical plan" in text and "Filter σ where" in text
    counters = text[text.index('id="stream-counters"') :]
    assert 'dropped at step volcano/filter</td><td data-label="Since the start">2' in counters
    for label, count in (("items later than the lateness", 4), ("windows revised", 5),
                         ("windows computed again, unchanged", 6)):  # fmt: skip
        assert f'{label}</td><td data-label="Since the start">{count}<' in counters
    # Spark's count is its query's: volcano shares query stateless with topics
    watermark = '<td data-label="Since the start">3</td>'
    assert f"dropped as late (watermark), for all 2 streams of query stateless</td>{watermark}" in (
        counters
    )
    assert 'id="stream-chart"' in text and "1 in all" in text
    assert "Volcano wakes" in text and 'href="https://example.org/v1"' in text
    assert 'href="/feeds/volcano.rss"' in text
    assert env.client.get("/console/streams/nothing").status_code == 404
    _plain(text)


def test_a_stream_alone_in_its_query_shows_its_watermark_count_plainly(env: Env):
    counters = env.client.get("/console/streams/headlines").text
    counters = counters[counters.index('id="stream-counters"') :]
    cell = '<td data-label="Since the start">0</td>'
    assert f'<td data-label="Counter">dropped as late (watermark)</td>{cell}' in counters


def test_editor_page_has_the_stable_ids(env: Env):
    page = env.client.get("/console/editor", params={"stream": "volcano"})
    for element in ("editor-form", "editor-text", "editor-kind", "editor-source", "editor-limit",
                    "editor-name", "preview", "problems", "preview-items", "apply-button",
                    "remove-button"):  # fmt: skip
        assert f'id="{element}"' in page.text, element
    textarea = page.text[page.text.index('id="editor-text"') :]
    assert "filter: {from: guardian" in textarea  # the stream's YAML, to edit
    new = env.client.get("/console/editor")
    assert 'id="remove-button"' not in new.text and 'value="10000"' in new.text
    _plain(page.text)


def test_preview_endpoint(env: Env):
    csrf = csrf_of(env.client.get("/console/editor").text)
    headers = {"Origin": ORIGIN, "X-CSRF-Token": csrf}
    ask = {"text": "contains(title, 'volcano')", "kind": "where", "source": "guardian",
           "limit": 500}  # fmt: skip
    answer = env.client.post("/console/preview", json=ask, headers=headers)
    assert answer.status_code == 200
    data = answer.json()
    assert data["matched"] == 1 and data["items"][0]["title"] == "Volcano <b>erupts</b>"
    (seen,) = env.engine.previews
    assert (seen.text, seen.kind, seen.source, seen.limit) == (
        ask["text"],
        "where",
        "guardian",
        500,
    )
    wrong = env.client.post("/console/preview", json={**ask, "text": "(("}, headers=headers)
    assert wrong.json()["problems"] == [{"message": "XPath syntax error", "line": 1, "column": 3}]
    for bad in ({"kind": "sort"}, {"limit": 0}, {"source": None}, {"name": "no spaces"}):
        refused = env.client.post("/console/preview", json={**ask, **bad}, headers=headers)
        assert refused.status_code == 400 and refused.json()["problems"][0]["message"]
    assert len(env.engine.previews) == 2


def test_apply_a_new_filter_stream(env: Env):
    csrf = csrf_of(env.client.get("/console/editor").text)
    where = 'contains(title, "quake")'
    fields = {"csrf": csrf, "action": "apply", "name": "quake", "kind": "where",
              "source": "guardian", "text": where, "publish": "on"}  # fmt: skip
    answer = post_form(env.client, "/console/apply", fields)
    assert answer.status_code == 200 and "Applied quake" in answer.text
    ((path, name, body),) = env.engine.applied
    assert path == env.config.path and name == "quake"
    assert body is not None and yaml.safe_load(body) == {
        "filter": {"from": "guardian", "where": 'contains(title, "quake")'}, "publish": True
    }  # fmt: skip
    assert (
        len(env.engine.reloads) == 1
        and "admin (127.0.0.1) apply stream quake" in env.engine.reloads[0]
    )
    assert 'id="reload-result"' in answer.text
    audit = [json.loads(x) for x in env.deps.audit_path.read_text().splitlines()]
    actions = [(a["action"], a.get("stream")) for a in audit]
    assert actions == [("login", None), ("apply requested", "quake"), ("apply done", "quake"),
                       ("reload", None)]  # fmt: skip
    assert audit[1]["body"] == body and audit[1]["user"] == "admin"


def test_apply_refused_shows_the_problems(env: Env):
    csrf = csrf_of(env.client.get("/console/editor").text)
    fields = {"csrf": csrf, "name": "quake", "kind": "stream", "text": "filter: {from: bad}"}
    answer = post_form(env.client, "/console/apply", fields)
    assert answer.status_code == 422
    assert "feeds.yaml:7: unknown source &#x27;bad&#x27;" in answer.text
    assert 'id="apply-problems"' in answer.text and "filter: {from: bad}" in answer.text
    assert env.engine.applied == [] and env.engine.reloads == []
    as_json = env.client.post(
        "/console/apply",
        json={"csrf": csrf, "name": "quake", "kind": "stream", "text": "filter: {from: bad}"},
        headers={"Origin": ORIGIN},
    )
    assert as_json.status_code == 422 and as_json.json()["problems"][0].endswith(
        "unknown source 'bad'"
    )


def test_removing_asks_first(env: Env):
    csrf = csrf_of(env.client.get("/console/editor", params={"stream": "volcano"}).text)
    ask = post_form(
        env.client, "/console/apply", {"csrf": csrf, "name": "volcano", "action": "remove"}
    )
    assert ask.status_code == 200 and 'id="confirm-remove-button"' in ask.text
    assert "/feeds/volcano.rss" in ask.text and "404" in ask.text
    assert "headlines" in ask.text  # it reads volcano by name
    assert env.engine.applied == []
    done = post_form(env.client, "/console/apply",
                     {"csrf": csrf, "name": "volcano", "action": "confirm-remove"})  # fmt: skip
    assert done.status_code == 200 and "Removed volcano" in done.text
    assert env.engine.applied == [(env.config.path, "volcano", None)]


def test_plan_svg_names_every_stream_of_a_small_config(env: Env):
    svg = plan_svg(env.config, {"volcano": "stateless"}, lambda s: 2.5, lambda s: 1.0)
    root = ElementTree.fromstring(svg)  # well-formed
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    for name in env.config.streams:
        assert f"Stream {name}" in texts
    assert "Source guardian" in texts and "2.5/h" in texts and "1.0/h" in texts
    links = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert "/console/streams/volcano" in links and len(links) == 3


def _huge(n: int) -> Config:
    sources: dict[str, SourceConfig] = {
        f"s{k}": FeedSource(f"s{k}", f"http://h/{k}", 600.0) for k in range(1000)
    }
    leaves = [Source(f"s{k}") for k in range(1000)]
    streams = {
        f"alert{k}": StreamConfig(
            f"alert{k}", Filter(leaves[k % 1000], f"contains(., 'w{k}')"), None
        )
        for k in range(n)
    }
    return Config(Path("/tmp/feeds.yaml"), Settings(), sources, streams)


def test_plan_svg_summarises_100000_streams():
    config = _huge(100_000)
    started = time.perf_counter()
    svg = plan_svg(config, {}, lambda s: None, lambda s: None)
    first = time.perf_counter() - started
    started = time.perf_counter()
    plan_svg(config, {}, lambda s: None, lambda s: None)
    again = time.perf_counter() - started
    print(f"plan picture of 100,000 streams: {first * 1000:.0f} ms, then {again * 1000:.0f} ms")
    root = ElementTree.fromstring(svg)
    boxes = list(root.iter(f"{SVG}rect"))
    assert len(boxes) <= 2 * 20 + 1
    assert "100,000 streams over 1,000 sources" in svg and "980 more sources" in svg
    assert "100 streams" in svg and "100 stateless, 0 stateful" in svg


def test_hourly_chart():
    now = 1_700_000_000.0
    hour = (now // 3600) * 3600
    svg = hourly_svg({hour: 5, hour - 3600: 2, hour - 30 * 86400: 9}, now)
    root = ElementTree.fromstring(svg)
    bars = [r for r in root.iter(f"{SVG}rect")]
    assert len(bars) == 2 and "7 in all, at most 5 an hour" in svg


@pytest.mark.parametrize("hours_into_the_day", [0, 1, 2, 6, 12, 23])
def test_every_date_label_stays_inside_the_chart(hours_into_the_day: int):
    """The newest day's label, its day begun an hour or two ago, sits left of its line
    rather than past the chart's right edge (a phone showed it past the screen)."""
    from roses_app.publish.console.chart import LABEL_WIDTH, WIDTH

    now = 1_699_920_000.0 + hours_into_the_day * 3600 + 60  # 2023-11-14 00:00 UTC + h
    root = ElementTree.fromstring(hourly_svg({}, now))
    labels = [
        t for t in root.iter(f"{SVG}text") if re.fullmatch(r"[A-Z][a-z]{2} \d\d", t.text or "")
    ]
    assert len(labels) == 7
    for label in labels:
        x = float(label.get("x", "0"))
        if label.get("text-anchor") == "end":
            assert x - LABEL_WIDTH >= 0, label.text
        else:
            assert x + LABEL_WIDTH <= WIDTH, label.text


def test_a_subscription_in_the_editor(tmp_path: Path):
    config = write_config(tmp_path)
    line = {"name": "ice", "from": "guardian", "where": "contains(title, 'ice')", "publish": True}
    (tmp_path / "subs.jsonl").write_text(json.dumps(line) + "\n")
    text = config.path.read_text() + "subscriptions: subs.jsonl\n"
    config.path.write_text(text)
    env = make_env(tmp_path, parse_config(text, config.path))
    login(env.client)
    page = env.client.get("/console/editor", params={"stream": "ice"})
    assert "line 1 of the subscriptions file" in page.text
    textarea = page.text[page.text.index('id="editor-text"') :]
    assert (
        "filter:\n  from: guardian\n  where: contains(title, &#x27;ice&#x27;)\npublish: true"
        in textarea
    )
    stream = env.client.get("/console/streams/ice")
    assert (
        f"{tmp_path / 'subs.jsonl'}:1" in stream.text
        and "&quot;name&quot;: &quot;ice&quot;" in stream.text
    )


def test_plan_svg_draws_a_shared_node_once_and_each_streams_query() -> None:
    """Two streams over one filter: the filter is one box, shared by both, and each
    stream's box names the Spark query that runs it."""
    shared = Filter(Source("s0"), "contains(title, 'volcano')")
    streams = {
        "eruptions": StreamConfig("eruptions", shared, None),
        "lava": StreamConfig("lava", Filter(shared, "contains(., 'lava')"), None),
    }
    sources: dict[str, SourceConfig] = {"s0": FeedSource("s0", "http://h/0", 600.0)}
    config = Config(Path("/tmp/feeds.yaml"), Settings(), sources, streams)
    svg = plan_svg(config, {"eruptions": "stateless", "lava": "q7"}, lambda s: None,
                   lambda s: None)  # fmt: skip
    texts = [t.text or "" for t in ElementTree.fromstring(svg).iter(f"{SVG}text")]
    assert sum("shared by 2 streams" in t for t in texts) == 1, texts
    assert any("query stateless" in t for t in texts) and any("query q7" in t for t in texts)
