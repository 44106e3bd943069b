"""No expression stalls or crashes the service (issue 43, items 1 and 5).

An expression ``roses check`` accepts may run for ever on some item (nested loops, a
regex that backtracks for ever) or build gigabytes: past ``settings.limits.item_time``
on one item, or past the worker's memory, that item is dropped by that step (counted,
logged with the stream, step and line) and every other item and stream goes on.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from roses_app.algebra.plan.operators import XQuery
from roses_app.config import parse_config
from roses_app.errors import (
    ConfigError,
    ExpressionError,
    ItemMemoryError,
    ItemTimeout,
    StepStruck,
)
from roses_app.xmlfn import (
    budget,
    check_xpath,
    filter_batch,
    map_batch,
    mutate_batch,
    xqguard,
)

# the four expressions of the issue, an item each stalled on, and what now happens
# to that item: the regex module answers the first at once (Python's re backtracked
# for ever), the others are dropped, past the time limit or refused a range of
# 100,000,000 items
STALLING = {
    "regex": ("matches(title, '^(a+)+$')", "a" * 41 + "!", None),
    "alternation": (r"matches(string(.), '^(\w|\w\w)*$')", "a" * 60 + "!", ItemTimeout),
    "loops": ("count(for $a in 1 to 100000, $b in 1 to 100000 return $a) > 0", "x", ItemTimeout),
    "string": (
        "string-length(string-join(for $i in 1 to 100000000 return 'xxxxxxxxxx')) > 0",
        "x",
        ItemMemoryError,
    ),
    "string within the range bound": (
        "string-length(string-join(for $i in 1 to 9000000 return 'xxxxxxxxxx')) > 0",
        "x",
        ItemTimeout,
    ),
}
# doubles the title thirty times: 40 GB from a 40-character title, in C calls
DOUBLING = "let $a0 := concat(title, title), " + ", ".join(
    f"$a{k} := concat($a{k - 1}, $a{k - 1})" for k in range(1, 31)
)
HUNGRY = DOUBLING + " return string-length($a30) > 0"


def item(title: str, guid: str) -> str:
    return f"<item><title>{title}</title><guid>{guid}</guid></item>"


@pytest.fixture
def one_second() -> Iterator[None]:
    before = budget.limit()
    budget.configure(1.0)
    yield
    budget.configure(before)


@pytest.mark.usefixtures("one_second")
@pytest.mark.parametrize("name", sorted(STALLING))
def test_an_expression_stalling_on_an_item_drops_that_item_only(name: str) -> None:
    expr, title, dropped_as = STALLING[name]
    dropped: list[tuple[str | None, Exception]] = []
    started = time.monotonic()
    kept = filter_batch(
        expr,
        (),
        [item(title, "bad"), item("ok", "good")],
        on_error=lambda xml, exc: dropped.append((xml, exc)),
    )
    # each item on its own budget (and a margin for a loaded machine: a stall was
    # minutes before)
    assert time.monotonic() - started < 2 * (1.0 + budget.MAX_TICK_SECONDS) + 3.0
    assert kept[0] is False
    if dropped_as is None:
        assert not dropped
        return
    assert dropped and dropped[0][0] == item(title, "bad")
    exc = dropped[0][1]
    assert isinstance(exc, dropped_as), exc
    assert "settings.limits.item_time" in str(exc) or "iterate over a smaller" in str(exc)


@pytest.mark.usefixtures("one_second")
def test_a_regex_past_the_limit_says_which_and_what_to_do() -> None:
    dropped: list[Exception] = []
    filter_batch(
        STALLING["alternation"][0],
        (),
        [item(STALLING["alternation"][1], "bad")],
        on_error=lambda _, exc: dropped.append(exc),
    )
    (exc,) = dropped
    assert isinstance(exc, ItemTimeout) and isinstance(exc, TimeoutError)
    assert "ran for more than 1 s on this item (settings.limits.item_time)" in str(exc)
    assert "matches(string(.)" in str(exc)


def test_regex_functions_give_what_they_gave_on_pythons_re() -> None:
    """matches, replace, tokenize and analyze-string run on the regex module now."""
    items = [item("Volcano erupts: 2 villages (Iceland) evacuated", "1")]
    assert filter_batch(r"matches(title, '^vol\w+\s', 'i')", (), items) == [True]
    assert filter_batch(r"matches(title, '\d{3}')", (), items) == [False]
    assert map_batch(r"replace(title, '(\w+) (\w+)', '$2 $1')", (), items) == [
        "<item>erupts Volcano: villages 2 (Iceland) evacuated</item>"
    ]
    assert map_batch("string-join(tokenize(title, '[:()]\\s*'), '|')", (), items) == [
        "<item>Volcano erupts|2 villages |Iceland|evacuated</item>"
    ]
    analyzed = "count(analyze-string(title, '\\d+')/*:match)"
    assert map_batch(f"string({analyzed})", (), items) == ["<item>1</item>"]
    # an invalid pattern is still the dynamic error it was
    dropped: list[Exception] = []
    filter_batch("matches(title, '(')", (), items, on_error=lambda _, e: dropped.append(e))
    assert "FORX0002" in str(dropped[0])


def test_a_range_too_long_to_build_fails_at_once() -> None:
    """At check time when it needs no item (elementpath evaluates that part as it
    parses), else on the item."""
    with pytest.raises(ExpressionError, match="more than 10,000,000 items"):
        check_xpath("count(1 to 100000000) > 0")
    dropped: list[Exception] = []
    started = time.monotonic()
    expr = "count(1 to xs:integer(title)) > 0"
    items = [item("100000000", "1"), item("1000", "2")]
    kept = filter_batch(expr, (), items, on_error=lambda _, e: dropped.append(e))
    assert kept == [False, True] and time.monotonic() - started < 3.0  # not 100,000,000
    assert isinstance(dropped[0], ItemMemoryError)
    assert "the range 1 to 100000000 has more than 10,000,000 items" in str(dropped[0])


# A child process, so that its memory limit is its own: the expression that asks for
# 40 GB is dropped, the next item is kept, and the process lives on.
_HUNGRY_CHILD = textwrap.dedent(
    """
    import sys
    from roses_app.rlimit import limit_memory
    from roses_app.xmlfn import filter_batch
    limit_memory(2 * 1024**3)
    dropped = []
    items = ["<item><title>%s</title></item>" % ("a" * 40), "<item><title>b</title></item>"]
    kept = filter_batch(sys.argv[1], (), items, on_error=lambda _, e: dropped.append(e))
    print(kept, [type(e).__name__ for e in dropped])
    print(filter_batch("title = 'b'", (), items))
    """
)


def test_an_expression_needing_too_much_memory_drops_its_item_not_the_worker() -> None:
    expr = f"if (title = 'b') then true() else ({HUNGRY})"
    done = subprocess.run(
        [sys.executable, "-c", _HUNGRY_CHILD, expr], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[False, True] ['ItemMemoryError']", "[False, True]"]


SPIN = (
    "if ($i/title = 'bad') then <item><n>{ count(for $a in 1 to 100000, $b in 1 to 100000 "
    "return $a) }</n></item> else $i"
)


@pytest.mark.usefixtures("one_second")
def test_an_xquery_past_the_limit_drops_that_item_and_keeps_its_neighbours() -> None:
    query = XQuery(SPIN, "spin.xq", 1)
    items = [item("bad" if k == 37 else f"t{k}", str(k)) for k in range(100)]
    dropped: list[tuple[str | None, Exception]] = []
    started = time.monotonic()
    out = mutate_batch(query, (), items, on_error=lambda xml, exc: dropped.append((xml, exc)))
    # a few deadlines: the batch, its sixteenth holding the culprit, then the culprit
    assert time.monotonic() - started < 30
    assert out[37] is None and all(out[k] for k in range(100) if k != 37)
    assert out[36] == items[36]
    ((xml, exc),) = dropped
    assert xml == items[37] and isinstance(exc, ItemTimeout)
    assert "map spin.xq ran for more than 1 s" in str(exc)
    # the next batch gets a new helper
    assert mutate_batch(query, (), items[:3]) == items[:3]


@pytest.mark.usefixtures("one_second")
def test_an_xquery_burst_costs_a_few_limits_then_the_batch_drops_the_rest() -> None:
    """A burst of 20 runaway units among 100: after budget.STRIKES of them have run
    past the limit, the batch's other units of that step are dropped unevaluated
    (each counted, saying why), as the Python steps do, instead of a few deadlines
    per runaway unit (50 s here without the strikes)."""
    query = XQuery(SPIN, "spin.xq", 1)
    items = [item("bad" if k % 5 == 2 else f"t{k}", str(k)) for k in range(100)]
    dropped: list[Exception] = []
    started = time.monotonic()
    out = mutate_batch(query, (), items, on_error=lambda _, exc: dropped.append(exc))
    took = time.monotonic() - started
    assert sum(isinstance(e, ItemTimeout) and not isinstance(e, StepStruck)
               for e in dropped) == budget.STRIKES  # fmt: skip
    struck = [e for e in dropped if isinstance(e, StepStruck)]
    assert struck and all("ran past settings.limits.item_time" in str(e) for e in struck)
    assert all(out[k] is None for k in range(100) if k % 5 == 2)
    assert len(dropped) == out.count(None)  # every unit dropped is counted
    assert took < 25, f"{took:.1f} s: a few limits per runaway unit"
    assert mutate_batch(query, (), items[:2]) == items[:2]  # the next batch starts afresh


def test_xquery_in_the_guard_gives_what_it_gives_in_process() -> None:
    """Results and dropped items alike with and without the helper (here 3 units per
    request: chunks and their parts too)."""
    query = XQuery("<item>{ $i/title }<n>{ xs:integer($i/guid) * 2 }</n></item>", "double.xq", 1)
    items: list[str | None] = [item(f"t{k}", "x" if k % 7 == 3 else str(k)) for k in range(20)]
    items[5] = None

    def run() -> tuple[list[str | None], list[str | None]]:
        dropped: list[str | None] = []
        out = mutate_batch(query, (), items, on_error=lambda xml, _: dropped.append(xml))
        return out, dropped

    before = budget.limit()
    try:
        budget.configure(None)
        alone = run()
        budget.configure(5.0)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(xqguard, "CHUNK_UNITS", 3)
            guarded = run()
    finally:
        budget.configure(before)
    assert guarded == alone
    assert len(alone[1]) == 3 and alone[0][5] is None


def test_the_limits_are_read_with_their_lines(tmp_path: Path) -> None:
    base = "sources:\n  a: {feed: 'file:a.xml'}\nstreams:\n  s: {filter: {from: a, where: title}}\n"
    config = parse_config(
        "settings:\n  limits: {item_time: 2s, worker_memory: 2GB}\n" + base, tmp_path / "f.yaml"
    )
    assert config.settings.limits.item_seconds == 2.0
    assert config.settings.limits.worker_memory == 2 * 1024**3
    off = parse_config(
        "settings:\n  limits: {item_time: 0, worker_memory: 0}\n" + base, tmp_path / "f.yaml"
    )
    assert (off.settings.limits.item_seconds, off.settings.limits.worker_memory) == (None, None)
    with pytest.raises(ConfigError) as bad:
        parse_config(
            "settings:\n  limits:\n    item_time: soon\n    worker_memory: 100MB\n" + base,
            tmp_path / "f.yaml",
        )
    messages = [f"{p.line}: {p.message}" for p in bad.value.problems]
    assert messages[0].startswith("3: bad duration 'soon'")
    assert messages[1].startswith("4: settings.limits.worker_memory must be at least 1.5GB")


def test_the_workers_get_the_limits_through_their_environment() -> None:
    from roses_app.config.model import LimitSettings, SparkSettings
    from roses_app.spark.session import session_conf

    conf = session_conf(SparkSettings(), limits=LimitSettings(2.5, 2 * 1024**3))
    assert conf["spark.executorEnv.ROSES_ITEM_SECONDS"] == "2.5"
    assert conf["spark.executorEnv.ROSES_WORKER_MEMORY"] == str(2 * 1024**3)
    off = session_conf(SparkSettings(), limits=LimitSettings(None, None))
    assert off["spark.executorEnv.ROSES_ITEM_SECONDS"] == "0"


_DAEMON_CHILD = textwrap.dedent(
    """
    import os, resource
    os.environ["ROSES_WORKER_MEMORY"] = str(2 * 1024**3)
    from roses_app.rlimit import MEMORY_ENV, limit_memory, memory_from_env
    limit_memory(memory_from_env(os.environ[MEMORY_ENV]))
    pid = os.fork()
    if pid == 0:  # a worker the daemon forks keeps its limit
        os._exit(0 if resource.getrlimit(resource.RLIMIT_DATA)[0] == 2 * 1024**3 else 1)
    print(os.waitpid(pid, 0)[1], memory_from_env("lots"))
    """
)


def test_the_python_daemon_limits_the_data_memory_of_its_workers() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DAEMON_CHILD], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["0", "None"], done.stderr
    assert "ROSES_WORKER_MEMORY='lots' is no number of bytes" in done.stderr


def feed(path: Path, titles: list[str]) -> None:
    path.write_text(
        "<rss version='2.0'><channel><title>t</title><link>http://example.org/</link>"
        + "".join(
            f"<item><title>{t}</title><guid isPermaLink='false'>g{k}</guid></item>"
            for k, t in enumerate(titles)
        )
        + "</channel></rss>"
    )


@pytest.mark.spark
def test_stalling_and_hungry_expressions_leave_the_other_streams_alone(
    tmp_path: Path, spark: object
) -> None:
    """The issue's four expressions, a runaway XQuery and a 40 GB one, each against a
    matching item, beside a stream of another source: that stream's item comes out,
    the bad items are dropped and counted per step, and the run ends."""
    from roses_app.config import load_config
    from roses_app.daemon import Daemon

    feed(tmp_path / "hostile.xml", ["a" * 60 + "!", "bad", "a" * 40, "ok"])
    feed(tmp_path / "calm.xml", ["calm news"])
    (tmp_path / "spin.xq").write_text(SPIN)
    filters = {name.replace(" ", "-"): expr for name, (expr, _, _) in STALLING.items()}
    filters["hungry"] = f"if (title = 'ok') then true() else ({HUNGRY})"
    streams: dict[str, object] = {
        name: {"filter": {"from": "hostile", "where": expr}, "publish": True}
        for name, expr in filters.items()
    }
    streams["spun"] = {"map": {"from": "hostile", "xquery": "spin.xq"}, "publish": True}
    streams["quiet"] = {"filter": {"from": "calm", "where": "true()"}, "publish": True}
    config = {
        "settings": {"data_dir": "./data", "limits": {"item_time": "1s", "worker_memory": "2GB"}},
        "sources": {"hostile": {"feed": "file:hostile.xml"}, "calm": {"feed": "file:calm.xml"}},
        "streams": streams,
    }
    (tmp_path / "feeds.yaml").write_text(yaml.safe_dump(config, width=1000))
    daemon = Daemon(load_config(tmp_path / "feeds.yaml"))
    try:
        started = time.monotonic()
        daemon.once()
        took = time.monotonic() - started
        assert [e.guid for e in daemon.store.latest("quiet", "", 10)] == ["g0"]
        assert {e.guid for e in daemon.store.latest("spun", "", 10)} == {"g0", "g2", "g3"}
        assert {e.guid for e in daemon.store.latest("hungry", "", 10)} == {"g3"}
        dropped = daemon.errors.value
    finally:
        daemon.close()
    # each stream dropped its item(s), and only those (the regex module answers the
    # first; the others: see STALLING)
    assert dropped == {
        "alternation/filter": 1,
        "loops/filter": 4,
        "string/filter": 4,
        "string-within-the-range-bound/filter": 4,
        "hungry/filter": 3,
        "spun/map": 1,
    }, dropped
    assert took < 120, took


def test_a_dropped_item_is_logged_with_its_stream_step_and_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from roses_app.algebra.planner.program import build_program
    from roses_app.spark.fused import error_hooks

    config = parse_config(
        "sources:\n  a: {feed: 'file:a.xml'}\nstreams:\n"
        "  slow:\n    filter: {from: a, where: 'title'}\n",
        "/srv/feeds.yaml",
    )
    node = config.streams["slow"].stream.plan
    step = build_program([(node, "slow")]).steps[-1]
    hook = error_hooks(None)(step)
    with caplog.at_level("WARNING"):
        hook(item("x", "g7"), ItemTimeout("XPath 'title' ran for more than 1 s"))
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == (
        "stream slow, step slow/filter (/srv/feeds.yaml:5): dropped an item (guid 'g7'): "
        "XPath 'title' ran for more than 1 s"
    )


@pytest.mark.usefixtures("one_second")
@pytest.mark.parametrize("kind", ["map", "split"])
def test_a_stalling_accessor_or_split_function_drops_that_item_only(kind: str) -> None:
    """The accessor of a map and a split's function, as the observer above."""
    from roses_app.xmlfn import split_batch

    loops = STALLING["loops"][0].removesuffix(" > 0")
    expr = f"if (title = 'bad') then string({loops}) else string(title)"
    run = map_batch if kind == "map" else split_batch
    dropped: list[Exception] = []
    started = time.monotonic()
    out = run(expr, (), [item("bad", "1"), item("ok", "2")],
              on_error=lambda _, e: dropped.append(e))  # fmt: skip
    assert time.monotonic() - started < 2 * (1.0 + budget.MAX_TICK_SECONDS) + 3.0
    assert out[0] is None and out[1] is not None
    assert "ok" in out[1]
    (exc,) = dropped
    assert isinstance(exc, ItemTimeout) and "settings.limits.item_time" in str(exc)


@pytest.mark.usefixtures("one_second")
def test_a_runaway_reducer_drops_its_group_and_keeps_the_others() -> None:
    """An aggregate's XQuery reducer that runs away on one window's items."""
    from roses_app.xmlfn.reduce import reduce_raw

    reducer = XQuery(
        "if ($items[title = 'bad']) then <item><n>{ count(for $a in 1 to 100000, "
        "$b in 1 to 100000 return $a) }</n></item> else <item><n>{ count($items) }</n></item>",
        "total.xq",
        1,
    )
    groups = [([item("a", "1"), item("b", "2")], None), ([item("bad", "3")], None),
              ([item("c", "4")], None)]  # fmt: skip
    dropped: list[Exception] = []
    started = time.monotonic()
    out = reduce_raw(reducer, (), groups, on_error=lambda _, e: dropped.append(e))
    assert time.monotonic() - started < 30
    assert out[1] is None and out[0] is not None and out[2] is not None
    assert "<n>2</n>" in out[0] and "<n>1</n>" in out[2]
    (exc,) = dropped
    assert isinstance(exc, ItemTimeout)
