"""feeds.yaml loading: the typed model, the plans, and every kind of mistake.

Each ``tests/data/config/bad_*.yaml`` has a sibling ``.expected`` file with one line per
problem the loader must report, ``LINE: MESSAGE``; `` ... `` in MESSAGE stands for any
text (used for messages that come from elementpath).  The loader must report exactly
those problems, no more.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from roses_app.algebra.plan.operators import Filter, Map, Node, Origin, Source, Split, Union
from roses_app.config import (
    Config,
    FeedSource,
    FetchSettings,
    HttpSettings,
    Publish,
    Settings,
    SparkSettings,
    format_problems,
    load_config,
    operator_registry,
    parse_config,
)
from roses_app.config import streams as streams_module
from roses_app.config.streams import OperatorContext, register_operator
from roses_app.config.yamlmarks import Marked
from roses_app.errors import ConfigError, ConfigProblem

CONFIGS = Path(__file__).resolve().parent / "data" / "config"
BAD = sorted(CONFIGS.glob("bad_*.yaml"))


def problems_of(path: Path | str) -> list[ConfigProblem]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def problems_in(text: str, tmp_path: Path) -> list[str]:
    """``LINE: message`` of every problem in config ``text``."""
    with pytest.raises(ConfigError) as info:
        parse_config(text, tmp_path / "feeds.yaml")
    return [f"{p.line}: {p.message}" for p in info.value.problems]


def _matches(expected: str, actual: str) -> bool:
    """``expected`` equals ``actual``, where each " ... " in it stands for any text."""
    open_end = expected.endswith(" ...")
    parts = expected.removesuffix(" ...").split(" ... ")
    if not actual.startswith(parts[0]) or not (open_end or actual.endswith(parts[-1])):
        return False
    pos = len(parts[0])
    for part in parts[1:]:
        found = actual.find(part, pos)
        if found < 0:
            return False
        pos = found + len(part)
    return len(parts) > 1 or open_end or actual == expected


# -- data-driven: bad configs -----------------------------------------------------------------


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_config_reports_exactly_the_expected_problems(path: Path) -> None:
    expected = [
        line for line in path.with_suffix(".expected").read_text().splitlines() if line.strip()
    ]
    problems = problems_of(path)
    assert all(p.file == str(path) for p in problems)
    actual = [f"{p.line}: {p.message}" for p in problems]
    unmatched = list(actual)
    missing = []
    for want in expected:
        hit = next((a for a in unmatched if _matches(want, a)), None)
        if hit is None:
            missing.append(want)
        else:
            unmatched.remove(hit)
    assert not missing and not unmatched, (
        "missing:\n  " + "\n  ".join(missing) + "\nunexpected:\n  " + "\n  ".join(unmatched)
    )


def test_every_bad_fixture_has_expectations() -> None:
    assert len(BAD) >= 15
    for path in BAD:
        assert path.with_suffix(".expected").exists(), path


def test_problems_are_sorted_by_line_and_all_reported_together() -> None:
    problems = problems_of(CONFIGS / "bad_many.yaml")
    assert [p.line for p in problems] == sorted(p.line for p in problems)
    kinds = {
        "bad duration",
        "duplicate key",
        "XPath syntax error",
        "unknown operator",
        "unknown key",
        "cyclic stream references",
        "unknown source or stream",
    }
    assert all(any(k in p.message for p in problems) for k in kinds)


def test_error_message_lists_every_problem_as_file_line_message() -> None:
    path = CONFIGS / "bad_references.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert text == format_problems(info.value.problems)
    assert text.splitlines()[0].startswith(f"{path}:9: stream 'a' refers to unknown")
    assert len(text.splitlines()) == 3
    assert isinstance(info.value, ValueError)


def test_format_problems_without_a_line() -> None:
    problems = [ConfigProblem("f.yaml", 0, "cannot read"), ConfigProblem("f.yaml", 3, "bad")]
    assert format_problems(problems) == "f.yaml: cannot read\nf.yaml:3: bad"


def test_missing_file(tmp_path: Path) -> None:
    problems = problems_of(tmp_path / "nope.yaml")
    assert len(problems) == 1
    assert problems[0].line == 0
    assert "cannot read the config file" in problems[0].message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_bytes(b"sources: {}\nstreams:\n  caf\xe9: x\n")
    problems = problems_of(path)
    assert [(p.line, p.message) for p in problems] == [
        (3, "the config file is not UTF-8 text (save it as UTF-8)")
    ]


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "feeds.yaml"
    path.write_bytes(b"\xef\xbb\xbfsources: {}\nstreams: {}\n")
    assert load_config(path).streams == {}


# -- the good config: exact model and plans ------------------------------------------------


@pytest.fixture(scope="module")
def good() -> Config:
    return load_config(CONFIGS / "good.yaml")


def test_good_settings(good: Config) -> None:
    assert good.path == CONFIGS / "good.yaml"
    assert good.settings == Settings(
        data_dir=CONFIGS / "state",
        http=HttpSettings(host="0.0.0.0", port=9090, base_url="https://feeds.example.org/"),
        spark=SparkSettings(
            master="local[2]",
            shuffle_partitions=4,
            trigger_seconds=0.5,
            busy_trigger_seconds=0.0,  # 0s: every poll's items appended at once
            conf=(("spark.ui.enabled", "false"), ("spark.x", "3")),
            class_archive=False,
        ),
        fetch=FetchSettings(
            timeout_seconds=10.0,
            max_bytes=512 * 1024,
            user_agent="test-agent",
            default_every_seconds=5400.0,
            max_backoff_seconds=86400.0,
        ),
        namespaces=(("geo", "http://www.w3.org/2003/01/geo/wgs84_pos#"),),
    )


def test_good_sources(good: Config) -> None:
    assert good.sources == {
        "guardian": FeedSource("guardian", "https://www.theguardian.com/world/rss", 600.0),
        "bigpicture": FeedSource(  # no every: adaptive, starting at settings.fetch.every
            "bigpicture",
            (CONFIGS.parent / "feeds" / "bigpicture.xml").as_uri(),
            5400.0,
            fixed=False,
        ),
        "local": FeedSource("local", "file:///srv/feeds/local.xml", 90.0),
    }
    assert [s.origin.line for s in good.sources.values()] == [9, 10, 11]


VOLCANO = Union(
    (
        Filter(Source("guardian"), "contains(lower-case(string(.)), 'volcano')"),
        Filter(Source("bigpicture"), "category = ('iceland', 'volcano')"),
    )
)


def test_good_plans(good: Config) -> None:
    plans = {name: s.plan for name, s in good.streams.items()}
    assert plans == {
        "volcano": VOLCANO,
        "topics": Split(
            Source("guardian"), "if (contains(string(.), 'football')) then 'sport' else 'other'"
        ),
        "titles": Map(VOLCANO, "title"),
        "short": Source("guardian"),
        "placed": Filter(Map(Source("local"), "."), "exists(geo:lat)"),
        "hidden": Filter(Map(VOLCANO, "title"), "true()"),
    }
    # inlined plans only have Source leaves, and only configured sources
    for stream in good.streams.values():
        for node in stream.plan.walk():
            assert bool(node.children()) != isinstance(node, Source)
            if isinstance(node, Source):
                assert node.name in good.sources


def test_good_publish(good: Config) -> None:
    publish = {name: s.publish for name, s in good.streams.items()}
    assert publish == {
        "volcano": Publish(title="Iceland volcano", keep_count=20),
        "topics": Publish(title="topics"),
        "titles": None,
        "short": None,
        "placed": Publish(title="placed", description="Items with a position"),
        "hidden": None,
    }
    assert [s.name for s in good.streams.values() if s.published] == ["volcano", "topics", "placed"]


def _origins(node: Node) -> list[tuple[int, str, str]]:
    return [(n.origin.line, n.origin.stream, n.origin.step) for n in node.walk()]


def test_origins(good: Config) -> None:
    file = str(CONFIGS / "good.yaml")
    volcano = good.streams["volcano"]
    assert volcano.origin == Origin(file, 13, "volcano", "volcano")
    assert volcano.plan.origin == Origin(file, 14, "volcano", "volcano/union")
    assert _origins(volcano.plan) == [
        (14, "volcano", "volcano/union"),
        (15, "volcano", "volcano/union[0]/filter"),
        (15, "volcano", "volcano/union[0]/filter/source:guardian"),
        (16, "volcano", "volcano/union[1]/filter"),
        (16, "volcano", "volcano/union[1]/filter/source:bigpicture"),
    ]
    assert _origins(good.streams["placed"].plan) == [
        (25, "placed", "placed/filter"),
        (27, "placed", "placed/filter/map"),
        (27, "placed", "placed/filter/map/source:local"),
    ]
    assert _origins(good.streams["short"].plan) == [(23, "short", "short/source:guardian")]
    # an inlined stream keeps the origins of where it was written
    assert _origins(good.streams["titles"].plan) == [
        (22, "titles", "titles/map"),
        *_origins(volcano.plan),
    ]
    assert all(n.origin.file == file for s in good.streams.values() for n in s.plan.walk())


def test_inlined_stream_is_the_same_plan_object(good: Config) -> None:
    titles = good.streams["titles"].plan
    assert isinstance(titles, Map)
    assert titles.input is good.streams["volcano"].plan


# -- smaller configs -------------------------------------------------------------------------


def test_defaults(tmp_path: Path) -> None:
    config = parse_config(
        "sources:\n  a: {feed: 'http://example.org/rss'}\nstreams:\n  s: a\n",
        tmp_path / "feeds.yaml",
    )
    assert config.settings == Settings(data_dir=tmp_path / "data")
    assert config.sources["a"].every_seconds == FetchSettings().default_every_seconds
    assert config.streams["s"].publish is None


def test_empty_sections_are_empty(tmp_path: Path) -> None:
    config = parse_config("settings:\nsources:\nstreams:\n", tmp_path / "feeds.yaml")
    assert (config.settings, config.sources, config.streams) == (
        Settings(data_dir=tmp_path / "data"),
        {},
        {},
    )


def test_source_every_defaults_to_settings_fetch_every(tmp_path: Path) -> None:
    config = parse_config(
        "settings: {fetch: {every: 2m}}\nsources:\n  a: {feed: 'http://x.org/rss'}\nstreams: {}\n",
        tmp_path / "feeds.yaml",
    )
    assert config.sources["a"].every_seconds == 120.0


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file:feeds/a.xml", "{base}/feeds/a.xml"),
        ("file:./feeds/../b.xml", "{base}/b.xml"),
        ("file:my%20feed.xml", "{base}/my%20feed.xml"),
        ("file:/abs/c.xml", "file:///abs/c.xml"),
        ("file:///abs/d.xml", "file:///abs/d.xml"),
        ("file://localhost/abs/e.xml", "file:///abs/e.xml"),
        ("https://example.org/rss?x=1", "https://example.org/rss?x=1"),
        ("HTTP://example.org/rss", "HTTP://example.org/rss"),
    ],
)
def test_feed_urls(tmp_path: Path, url: str, expected: str) -> None:
    config = parse_config(
        f"sources:\n  a: {{feed: '{url}'}}\nstreams: {{}}\n", tmp_path / "sub" / "feeds.yaml"
    )
    assert config.sources["a"].url == expected.format(base=(tmp_path / "sub").as_uri())


def test_absolute_data_dir_and_home(tmp_path: Path) -> None:
    config = parse_config(
        f"settings: {{data_dir: {tmp_path}/x}}\nsources: {{}}\nstreams: {{}}\n",
        tmp_path / "feeds.yaml",
    )
    assert config.settings.data_dir == tmp_path / "x"
    config = parse_config(
        "settings: {data_dir: ~/roses}\nsources: {}\nstreams: {}\n", tmp_path / "feeds.yaml"
    )
    assert config.settings.data_dir == Path.home() / "roses"


def test_relative_config_path_resolves_against_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "feeds.yaml").write_text(
        "settings: {data_dir: d}\nsources:\n  a: {feed: 'file:x.xml'}\nstreams: {}\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_config("conf/feeds.yaml")
    assert config.path == tmp_path / "conf" / "feeds.yaml"
    assert config.settings.data_dir == tmp_path / "conf" / "d"
    assert config.sources["a"].url == (tmp_path / "conf" / "x.xml").as_uri()
    assert config.sources["a"].origin.file == "conf/feeds.yaml"


def test_anchors_aliases_and_merge_keys(tmp_path: Path) -> None:
    text = """\
x-common: &hourly {every: 1h}
sources:
  a: {<<: *hourly, feed: 'http://a.org/rss'}
  b:
    <<: *hourly
    feed: 'http://b.org/rss'
    every: 5m          # overrides the merged key silently
streams:
  s:
    filter: {from: a, where: &w "exists(title)"}
  t:
    filter: {from: b, where: *w}
"""
    # x-common is not a known key: aliases are for reuse, the key still has to be valid
    assert problems_in(text, tmp_path) == [
        "1: unknown key 'x-common' in the top level "
        "(expected: settings, sources, streams, subscriptions)"
    ]
    config = parse_config(text.replace("x-common:", "settings:\n  fetch:"), tmp_path / "f.yaml")
    assert config.sources["a"].every_seconds == 3600.0
    assert config.sources["b"].every_seconds == 300.0
    assert config.settings.fetch.default_every_seconds == 3600.0
    assert config.streams["t"].plan == Filter(Source("b"), "exists(title)")


def test_publish_false_and_empty_mapping(tmp_path: Path) -> None:
    config = parse_config(
        "sources:\n  a: {feed: 'http://a.org/rss'}\n"
        "streams:\n  s: {filter: {from: a, where: 'true()'}, publish: false}\n"
        "  t: {filter: {from: a, where: 'true()'}, publish: {}}\n",
        tmp_path / "feeds.yaml",
    )
    assert config.streams["s"].publish is None
    assert config.streams["t"].publish == Publish(title="t", description="", keep_count=50)


def test_numeric_and_boolean_like_names_are_names(tmp_path: Path) -> None:
    config = parse_config(
        "sources:\n  2024: {feed: 'http://a.org/rss'}\n  yes: {feed: 'http://b.org/rss'}\n"
        "streams:\n  no: {union: [2024, yes]}\n  '10': {filter: {from: no, where: 'true()'}}\n"
        "  n: 10\n",
        tmp_path / "feeds.yaml",
    )
    assert list(config.sources) == ["2024", "yes"]
    assert list(config.streams) == ["no", "10", "n"]
    both = Union((Source("2024"), Source("yes")))
    assert config.streams["no"].plan == both
    assert config.streams["n"].plan == Filter(both, "true()")


def test_reference_to_broken_source_does_not_cascade(tmp_path: Path) -> None:
    assert problems_in(
        "sources:\n  a: {feed: 'gopher://a'}\n"
        "streams:\n  s: {filter: {from: a, where: 'true()'}}\n",
        tmp_path,
    ) == [
        "2: sources.a.feed: a feed URL must start with http://, https:// or file:, got 'gopher://a'"
    ]


def test_reference_to_broken_stream_does_not_cascade(tmp_path: Path) -> None:
    assert problems_in(
        "sources:\n  a: {feed: 'http://a.org/rss'}\nstreams:\n"
        "  s: {filter: {from: a, where: 'true('}}\n"
        "  t: {map: {from: s, xpath: title}}\n"
        "  u: {union: [s, t]}\n",
        tmp_path,
    )[0].startswith("4: XPath syntax error in filter.where: ")


def test_long_cycle_is_reported_once(tmp_path: Path) -> None:
    problems = problems_in(
        "sources: {}\nstreams:\n"
        "  a: {filter: {from: b, where: 'true()'}}\n"
        "  b: {map: {from: c, xpath: title}}\n"
        "  c: {union: [x, a]}\n"
        "  x: {filter: {from: c, where: 'true()'}}\n",
        tmp_path,
    )
    assert problems == [
        "5: cyclic stream references: a -> b -> c -> a",
        "6: cyclic stream references: c -> x -> c",
    ]


def test_known_names_are_truncated_in_messages(tmp_path: Path) -> None:
    sources = "".join(f"  s{i}: {{feed: 'http://a.org/{i}'}}\n" for i in range(30))
    [problem] = problems_in(f"sources:\n{sources}streams:\n  t: nope\n", tmp_path)
    assert problem.startswith(
        "33: stream 't' refers to unknown source or stream 'nope' (known: s0,"
    )
    assert problem.endswith("s19, ... (11 more))")


def test_xpath_variables_and_declared_namespaces(tmp_path: Path) -> None:
    config = parse_config(
        "settings: {namespaces: {g: 'urn:g'}}\nsources:\n  a: {feed: 'http://a.org/rss'}\n"
        "streams:\n  s: {filter: {from: a, where: '$i/title and exists(g:x) and dc:creator'}}\n",
        tmp_path / "feeds.yaml",
    )
    assert config.streams["s"].plan == Filter(
        Source("a"), "$i/title and exists(g:x) and dc:creator"
    )


def test_multiline_xpath_is_reported_at_its_first_line(tmp_path: Path) -> None:
    problems = problems_in(
        "sources:\n  a: {feed: 'http://a.org/rss'}\nstreams:\n  s:\n    filter:\n"
        "      from: a\n      where: |\n        contains(title,\n          'x'\n",
        tmp_path,
    )
    assert len(problems) == 1
    assert problems[0].startswith("7: XPath syntax error in filter.where: ")


# -- the operator registry -------------------------------------------------------------------


def test_registering_an_operator(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(operator_registry, "_OPERATORS", dict(operator_registry._OPERATORS))
    seen: list[Origin] = []

    def build_both(ctx: OperatorContext, value: Marked) -> Node | None:
        args = ctx.arguments(value, required=("left", "right", "on"))
        left = ctx.input(args.get("left"), ".left")
        right = ctx.input(args.get("right"), ".right")
        on = ctx.xpath(args, "on", variables=("i1", "i2"))
        seen.append(ctx.origin)
        if left is None or right is None or on is None:
            return None
        return Union((left, right), origin=ctx.origin)

    register_operator("both", build_both)
    assert streams_module.operator_names()[-1] == "both"
    config = parse_config(
        "sources:\n  a: {feed: 'http://a.org/rss'}\n  b: {feed: 'http://b.org/rss'}\n"
        "streams:\n  s:\n    both:\n      left: a\n"
        "      right: {filter: {from: b, where: 'true()'}}\n"
        "      on: '$i1/link = $i2/link'\n",
        tmp_path / "feeds.yaml",
    )
    plan = config.streams["s"].plan
    assert plan == Union((Source("a"), Filter(Source("b"), "true()")))
    assert _origins(plan) == [
        (6, "s", "s/both"),
        (7, "s", "s/both.left/source:a"),
        (8, "s", "s/both.right/filter"),
        (8, "s", "s/both.right/filter/source:b"),
    ]
    problems = problems_in(
        "sources: {}\nstreams:\n  s: {both: {left: x, on: '$i3'}}\n  t: {fliter: {}}\n", tmp_path
    )
    assert "3: missing required key 'right' in both" in problems
    assert any(
        p.startswith("3: stream 's' refers to unknown source or stream 'x'") for p in problems
    )
    assert any(
        p.startswith(
            "4: unknown operator 'fliter' (expected one of: filter, map, union, "
            "split, window, join, product, semijoin, diff, delta, aggregate, group, grouping, "
            "nest, unnest, both; or publish, time)"
        )
        for p in problems
    )


# -- layering --------------------------------------------------------------------------------


def test_importing_algebra_and_config_loads_neither_lxml_nor_pyspark() -> None:
    code = (
        "import sys, roses_app.algebra, roses_app.config\n"
        "bad = [m for m in ('lxml', 'pyspark', 'elementpath') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
