"""Live preview: problems located in the text, and what a stream would publish from the
spool's last items (filter, split, map, window, aggregate), read once and kept."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roses_app.algebra.reference.evaluator import evaluate_stream
from roses_app.algebra.reference.registry import RefInput
from roses_app.config import load_config
from roses_app.config.model import Config
from roses_app.publish.preview import Previewer, PreviewRequest
from roses_app.publish.preview_check import check_request
from roses_app.spool import Spool
from roses_app.spoolfiles import read_spool

CONFIG = """\
settings:
  data_dir: ./data
sources:
  news: {feed: "file:news.xml"}
  blog: {feed: "file:blog.xml"}
  quiet: {feed: "file:quiet.xml"}
streams:
  volcanic:
    filter: {from: news, where: "contains(lower-case(title), 'volcano')"}
"""
TOPICS = ("volcano", "football", "election")


def item(source: str, n: int) -> str:
    topic = TOPICS[n % len(TOPICS)]
    return (
        f"<item><title>{source} {n}: {topic.capitalize()} news</title>"
        f"<link>https://{source}.example/{n}</link><guid>{source}-{n}</guid>"
        f"<category>{topic}</category>"
        f"<pubDate>Mon, 03 Jun 2024 10:{n % 60:02d}:00 GMT</pubDate></item>"
    )


@pytest.fixture
def world(tmp_path: Path) -> tuple[Config, Spool]:
    (tmp_path / "feeds.yaml").write_text(CONFIG)
    config = load_config(tmp_path / "feeds.yaml")
    spool = Spool(tmp_path / "data" / "spool")
    for n in range(60):  # 60 appends: news every time, blog every other one
        polls = [("news", [(item("news", n), None)])]
        if n % 2 == 0:
            polls.append(("blog", [(item("blog", n), None)]))
        spool.append_many(polls)
    return config, spool


def previewer(config: Config, spool: Spool) -> Previewer:
    return Previewer(lambda: config, spool.root)


def every_event(spool: Spool) -> list[RefInput]:
    return [RefInput(e.source, e.ts, e.seq, e.item, e.published) for e in read_spool(spool.root)]


# -- problems --------------------------------------------------------------------------------


def problems(config: Config, text: str, kind: str, source: str | None = "news") -> list[tuple]:
    found = check_request(config, text, kind, source, "preview").problems
    return [(p.line, p.column, p.message) for p in found]


def test_expression_errors_carry_their_line_and_column(world: tuple[Config, Spool]) -> None:
    config, _ = world
    [(line, column, message)] = problems(config, "contains(title, 'x'", "where")
    assert (line, column) == (1, 17)  # elementpath: the last token read, the literal
    assert message.startswith("XPath syntax error in filter.where: ")
    assert "unexpected end of source" in message
    [(line, column, message)] = problems(config, "title = = 3", "by")
    assert (line, column) == (1, 9) and "split.by" in message
    [(line, column, _)] = problems(config, "title,\n  foo(1)", "map")
    assert (line, column) == (2, 3)  # the unknown function, on the expression's 2nd line
    [(line, column, message)] = problems(config, "$j", "where")
    assert (line, column) == (1, None) and "unknown variable $j" in message
    [(line, column, message)] = problems(config, "true()", "where", "nowhere")
    assert (line, column) == (None, None)
    assert message.startswith("stream 'preview' refers to unknown source or stream 'nowhere'")
    [(_, _, message)] = problems(config, "true()", "where", None)
    assert "filter.from" in message


def test_a_stream_body_is_checked_as_roses_check_checks_feeds_yaml(
    world: tuple[Config, Spool],
) -> None:
    config, _ = world
    body = "filter:\n  from: news\n  where: \"contains(title, 'a') and\"\npublish: true\n"
    [(line, column, message)] = problems(config, body, "stream")
    # elementpath's column 22 of the expression, which starts at line 3, column 11
    assert (line, column) == (3, 11 + 22 - 1)
    assert message.startswith("XPath syntax error in filter.where")
    body = "filtre: {from: news, where: 'true()'}\npublish: {title: 3, keep: {count: 0}}\n"
    found = problems(config, body, "stream")
    assert [(line, column, message.split(" (")[0]) for line, column, message in found] == [
        (1, None, "unknown operator 'filtre'"),
        (2, None, "streams.preview.publish.title must be a string, got a number"),
        (2, None, "streams.preview.publish.keep.count must be a positive whole number, got 0"),
    ]
    [(line, _, message)] = problems(config, "union: [news, volcanic\n", "stream")
    assert line == 2 and message.startswith("YAML syntax error: expected ',' or ']'")
    [(line, _, message)] = problems(config, "", "stream")
    assert line == 1 and message.startswith("the stream is empty")
    assert problems(config, "volcanic", "stream") == []  # a view of another stream


# -- results ---------------------------------------------------------------------------------


def test_a_filter_preview_counts_per_source_and_skips_what_cannot_match(
    world: tuple[Config, Spool],
) -> None:
    config, spool = world
    preview = previewer(config, spool)
    where = "contains(lower-case(title), 'volcano')"
    body = f'filter: {{from: {{union: [news, blog]}}, where: "{where}"}}'
    result = preview.preview(PreviewRequest(body, "stream", name="volcano-all"))
    assert result.problems == ()
    assert result.scanned == 90  # news 60, blog 30
    assert result.per_source == {"news": 20, "blog": 10}
    assert result.matched == 30 and len(result.items) == 30
    assert result.presearched and result.evaluated == 30  # 60 items never evaluated
    newest = result.items[0]
    assert (newest.source, newest.title, newest.part) == ("news", "news 57: Volcano news", None)
    assert newest.link == "https://news.example/57"
    assert newest.published == "2024-06-03T10:57:00Z"
    assert [i.title for i in result.items] == sorted(
        [i.title for i in result.items], key=lambda t: -int(t.split()[1].rstrip(":"))
    )
    json.dumps(result.to_json())  # what the console sends

    only_news = preview.preview(PreviewRequest(where, "where", source="news", limit=10))
    assert only_news.scanned == 10 and only_news.per_source == {"news": 3}  # news 50..59
    assert [i.title.split(":")[0] for i in only_news.items] == ["news 57", "news 54", "news 51"]


def test_split_and_map_previews(world: tuple[Config, Spool]) -> None:
    config, spool = world
    preview = previewer(config, spool)
    split = preview.preview(PreviewRequest("string(category)", "by", source="blog"))
    assert split.split_values == {"volcano": 10, "football": 10, "election": 10}
    assert split.matched == 30 and split.items[0].part == "football"  # blog 58: 58 % 3 == 1
    assert {i.part for i in split.items} == set(TOPICS)
    mapped = preview.preview(PreviewRequest("title, link", "map", source="volcanic", limit=5))
    assert mapped.scanned == 5 and mapped.matched == 1  # news 55..59: 57 only is volcanic
    [only] = mapped.items
    assert only.xml == (
        "<item><title>news 57: Volcano news</title><link>https://news.example/57</link></item>"
    )
    assert (only.source, only.title, only.published) == ("news", "news 57: Volcano news", None)


def test_a_window_and_an_aggregate_are_the_reference_engine_over_the_items(
    world: tuple[Config, Spool],
) -> None:
    config, spool = world
    preview = previewer(config, spool)
    body = "window: {from: blog, count: 3}\n"
    result = preview.preview(PreviewRequest(body, "stream", name="last3"))
    checked = check_request(config, body, "stream", None, "last3")
    assert checked.stream is not None
    events = [e for e in every_event(spool) if e.source in ("blog", "")]
    expected = evaluate_stream(checked.stream, events, ())
    assert result.matched == sum(map(len, expected.values())) > 30
    assert result.scanned == 30 and not result.presearched
    reduce = "<item><title>{count($items)} items</title></item>"
    body = f"aggregate:\n  from: {{window: {{from: news, count: 4}}}}\n  reduce: '{reduce}'\n"
    counted = preview.preview(PreviewRequest(body, "stream", name="counts", limit=20))
    assert counted.problems == () and counted.scanned == 20
    aggregate = check_request(config, body, "stream", None, "counts").stream
    assert aggregate is not None
    last20 = [e for e in every_event(spool) if e.source == "news"][-20:]
    digests = evaluate_stream(aggregate, last20, ())[""]
    assert counted.matched == len(digests) == 19  # the latest time is not decided yet
    assert [i.xml for i in counted.items] == [e.item for e in reversed(digests)]
    assert counted.items[0].title == "4 items" and counted.items[-1].title == "1 items"


def test_a_join_preview_is_the_reference_engine_over_both_sides(
    world: tuple[Config, Spool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A join of the news with the blog's last hour, on the topic: what the reference
    engine gives over the same spooled items, pairs combined."""
    from roses_app.publish import preview as previews

    monkeypatch.setattr(previews, "MAX_ITEMS", 10_000)  # every pair shown
    config, spool = world
    preview = previewer(config, spool)
    body = (
        "join:\n  left: news\n  right: {window: {from: blog, time: 1h}}\n"
        "  on: '$i1/category = $i2/category'\n"
    )
    result = preview.preview(PreviewRequest(body, "stream", name="paired"))
    assert result.problems == () and result.scanned == 90
    joined = check_request(config, body, "stream", None, "paired").stream
    assert joined is not None
    events = [e for e in every_event(spool) if e.source in ("news", "blog", "")]
    expected = evaluate_stream(joined, events, ())[""]
    assert result.matched == len(expected) == len(result.items) > 100
    assert sorted(i.xml or "" for i in result.items) == sorted(e.item or "" for e in expected)
    assert all("roses:related" in (i.xml or "") for i in result.items)


def test_the_spool_is_read_once_and_only_what_is_new_after(world: tuple[Config, Spool]) -> None:
    config, spool = world
    preview = previewer(config, spool)
    request = PreviewRequest("contains(title, 'Football')", "where", source="news", limit=100)
    first = preview.preview(request)
    assert first.scanned == 60 and first.complete
    read = preview.tail.files_read
    again = preview.preview(PreviewRequest("contains(title, 'Election')", "where", source="news"))
    assert preview.tail.files_read == read and again.matched == 20
    spool.append("news", [(item("news", 61), None)])  # a football item
    after = preview.preview(request)
    assert preview.tail.files_read == read + 1
    assert after.scanned == 61 and after.matched == first.matched + 1
    quiet = preview.preview(PreviewRequest("true()", "where", source="quiet"))
    assert (quiet.scanned, quiet.matched, quiet.complete) == (0, 0, True)


def test_previews_from_several_threads_agree(world: tuple[Config, Spool]) -> None:
    config, spool = world
    preview = previewer(config, spool)
    requests = [
        PreviewRequest(f"contains(lower-case(title), '{topic}')", "where", source=source)
        for topic in TOPICS
        for source in ("news", "blog")
    ] * 4
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(preview.preview, requests))
    alone = [previewer(config, spool).preview(r) for r in requests[:6]]
    assert [r.matched for r in results] == [r.matched for r in alone] * 4
    assert [r.matched for r in alone] == [20, 10, 20, 10, 20, 10]


def test_the_tail_keeps_at_most_its_bound_and_reads_back_what_it_let_go(
    world: tuple[Config, Spool],
) -> None:
    from roses_app.publish.preview_tail import SpoolTail

    _, spool = world
    tail = SpoolTail(spool.root, max_held=40)
    last = tail.last({"news"}, 20)
    assert [e.item for e in last.events] == [item("news", n) for n in range(40, 60)]
    assert not last.complete
    for n in range(60, 100):  # 40 more appends: the oldest held are let go
        spool.append("news", [(item("news", n), None)])
    newest = tail.last({"news"}, 20)
    assert [e.item for e in newest.events] == [item("news", n) for n in range(80, 100)]
    assert len(tail.field_texts(newest.events, "title", True)) == 20
    blog = tail.last({"blog"}, 5)  # read back from the spool's older files
    assert [e.item for e in blog.events] == [item("blog", n) for n in range(50, 60, 2)]
    assert len(tail.last({"news"}, 20).events) == 20  # the blog items read back let go
    everything = tail.last({"news", "blog"}, 1000)  # beyond the bound: what a window needs
    assert everything.items == 130 and everything.complete
