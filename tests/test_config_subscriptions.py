"""Subscriptions kept as data beside feeds.yaml: one filter stream per JSON line.

They are streams like feeds.yaml's (the same plans, checks and messages), each
mistake reported at its file:line with the others, and their names share one
namespace with the sources and streams of feeds.yaml.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roses_app.algebra.plan.operators import Filter, Source, Union
from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
from roses_app.cli import main
from roses_app.config import load_config
from roses_app.config import subscriptions as subscriptions_module
from roses_app.errors import ConfigError

HEAD = """\
sources:
  news: {feed: "http://127.0.0.1:1/news.xml"}
  blog: {feed: "http://127.0.0.1:1/blog.xml"}
streams:
  lava:
    filter: {from: news, where: "contains(lower-case(title), 'lava')"}
    publish: true
subscriptions: subs.jsonl
"""


def write(tmp_path: Path, lines: list[object] | list[str], head: str = HEAD) -> Path:
    (tmp_path / "subs.jsonl").write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    config = tmp_path / "feeds.yaml"
    config.write_text(head)
    return config


def problems(config: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(config)
    return [f"{Path(p.file).name}:{p.line}: {p.message}" for p in info.value.problems]


def test_each_line_is_a_filter_stream_with_its_file_and_line(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            [
                {"name": "volcano", "from": "news", "where": "contains(title, 'volcano')"},
                "",  # blank lines are skipped
                {
                    "name": "both",
                    "from": ["news", "blog"],
                    "where": "category = 'ice'",
                    "publish": {"title": "Ice", "keep": {"count": 5}},
                },
                {"name": "again", "from": "lava", "where": "true()", "publish": True},
            ],
        )
    )
    assert list(config.streams) == ["lava", "volcano", "both", "again"]
    volcano, both, again = (config.streams[n] for n in ("volcano", "both", "again"))
    assert volcano.plan == Filter(Source("news"), "contains(title, 'volcano')")
    assert volcano.publish is None
    assert both.plan == Filter(Union((Source("news"), Source("blog"))), "category = 'ice'")
    assert both.publish is not None and both.publish.keep_count == 5
    assert again.plan == Filter(config.streams["lava"].plan, "true()")  # a stream by name
    subs = str(tmp_path / "subs.jsonl")
    assert (volcano.origin.file, volcano.origin.line) == (subs, 1)
    assert (both.plan.origin.file, both.plan.origin.line) == (subs, 3)
    assert both.plan.children()[0].origin.file == subs


def test_a_broken_line_is_reported_at_its_line_and_the_others_are_read(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        [
            {"name": "ok", "from": "news", "where": "true()"},
            "{not json",
            {"name": "x", "from": "news"},
            {"name": "y", "from": "news", "where": "true()", "colour": "red"},
            {"name": "bad name", "from": "news", "where": "true()"},
            {"name": "z", "from": "nowhere", "where": "true()"},
            {"name": "w", "from": "news", "where": "contains(title,"},
            {"name": "v", "from": [], "where": "true()"},
            {"name": "u", "from": "news", "where": "true()", "publish": "yes"},
            [1, 2],
        ],
    )
    found = problems(config)
    assert [p.split(":")[1] for p in found] == [str(n) for n in range(2, 11)]
    assert found[0].startswith("subs.jsonl:2: not a JSON object")
    assert (
        found[1]
        == "subs.jsonl:3: missing key(s) 'where' (a subscription has: name, from, where, publish)"
    )
    assert found[2].startswith("subs.jsonl:4: unknown key(s) 'colour'")
    assert found[3].startswith("subs.jsonl:5: invalid subscription name 'bad name'")
    assert found[4].startswith(
        "subs.jsonl:6: stream 'z' refers to unknown source or stream 'nowhere'"
    )
    assert found[5].startswith("subs.jsonl:7: XPath syntax error in filter.where")
    assert found[6].startswith("subs.jsonl:8: from must be a source or stream name or a list")
    assert found[7].startswith("subs.jsonl:9: streams.u.publish must be true, false or a mapping")
    assert found[8].startswith("subs.jsonl:10: a subscription is a JSON object")


def test_names_are_one_namespace_with_feeds_yaml(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        [
            {"name": "lava", "from": "news", "where": "true()"},
            {"name": "news", "from": "blog", "where": "true()"},
            {"name": "dup", "from": "news", "where": "true()"},
            {"name": "dup", "from": "blog", "where": "true()"},
        ],
    )
    found = problems(config)
    yaml = str(tmp_path / "feeds.yaml")
    assert found == [
        f"subs.jsonl:1: subscription 'lava' has the same name as the stream at {yaml}:5; "
        "sources, streams and subscriptions share one namespace (rename one of them)",
        f"subs.jsonl:2: subscription 'news' has the same name as the source at {yaml}:2; "
        "sources, streams and subscriptions share one namespace (rename one of them)",
        f"subs.jsonl:4: subscription 'dup' is already at {tmp_path / 'subs.jsonl'}:3 (rename one)",
    ]


def test_a_missing_or_oversized_file_is_a_problem_of_feeds_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = HEAD.replace("subscriptions: subs.jsonl", "subscriptions: [subs.jsonl, gone.jsonl]")
    config = write(tmp_path, [{"name": "a", "from": "news", "where": "true()"}], head)
    [missing] = problems(config)
    assert missing.startswith("feeds.yaml:8: cannot read subscriptions file ")
    assert "gone.jsonl: No such file or directory" in missing
    monkeypatch.setattr(subscriptions_module, "MAX_CONFIG_BYTES", 10)
    [big, _] = problems(config)
    assert big.startswith("feeds.yaml:8: subscriptions file ")
    assert "more than the 10 of a config file" in big


def test_streams_may_be_left_out_when_subscriptions_hold_them(tmp_path: Path) -> None:
    head = "sources: {news: {feed: 'http://127.0.0.1:1/n.xml'}}\nsubscriptions: subs.jsonl\n"
    config = write(tmp_path, [{"name": "a", "from": "news", "where": "true()"}], head)
    assert list(load_config(config).streams) == ["a"]


def test_check_and_explain_read_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, [{"name": "a", "from": ["news", "blog"], "where": "true()"}])
    assert main(["check", "-c", str(config)]) == 0
    assert "OK (2 sources, 2 streams)" in capsys.readouterr().out
    assert main(["explain", "--logical-only", "-c", str(config), "a"]) == 0
    out = capsys.readouterr().out
    assert f"Filter σ where 'true()'  [{tmp_path / 'subs.jsonl'}:1]" in out


def test_they_compute_what_the_same_streams_in_feeds_yaml_do(tmp_path: Path) -> None:
    rows = [
        {"name": f"s{k}", "from": ["news", "blog"][: 1 + k % 2], "where": where}
        for k, where in enumerate(
            ["contains(title, 'a')", "contains(lower-case(title), 'b')", "title = 'c'"]
        )
    ]
    written = "".join(
        f'  {r["name"]}: {{filter: {{from: {{union: {r["from"]}}}, where: "{r["where"]}"}}}}\n'
        for r in rows
    )
    as_data = load_config(write(tmp_path, rows))
    (tmp_path / "inline.yaml").write_text(HEAD.replace("subscriptions: subs.jsonl\n", written))
    inline = load_config(tmp_path / "inline.yaml")
    events = [
        RefInput(source, t, t, f"<item><title>{title}</title></item>")
        for t, (source, title) in enumerate(
            [("news", "a lava"), ("blog", "B"), ("news", "c"), ("blog", "a")], 1
        )
    ]

    def run(config: object) -> object:
        return evaluate_streams([s.stream for s in config.streams.values()], events)  # type: ignore[attr-defined]

    assert run(as_data) == run(inline)
