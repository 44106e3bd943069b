"""Config bombs are refused, and plans stay DAGs (issue 10, item 3).

``tests/data/config_limits/bad_*.yaml`` each go beyond one limit of
:mod:`roses_app.config.limits` and have a sibling ``.expected`` (``LINE: message``);
``good_*.yaml`` reach 2^20 or 2^60 paths through a handful of plan nodes and must
work, as must 100,000 subscriptions: the limits bound what costs, not a count.
Whatever could run away (expand a YAML alias bomb, walk a plan as a tree) runs in a
child process under a generous timeout: a regression fails instead of hanging the
suite (a guard, not a measure of speed).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from roses_app.algebra.plan.operators import NODE_TYPES, Filter, Node, Origin, Source, Union
from roses_app.algebra.planner.globalplan import fingerprint, node_fingerprint
from roses_app.config import load_config, parse_config
from roses_app.config import loader as loader_module
from roses_app.errors import ConfigError

DATA = Path(__file__).resolve().parent / "data" / "config_limits"
BAD = sorted(DATA.glob("bad_*.yaml"))
GOOD = sorted(DATA.glob("good_*.yaml"))
GUARD_S = 60  # a hang, not slowness: each child needs about a second
MAX_RSS_KB = 300 * 1024

# Runs its arguments (under the guard's timeout) and prints their exit code and peak
# memory (KB) on its last line of stdout: the child's own rusage, apart from whatever
# this test process started.
_MEASURED = textwrap.dedent(
    """
    import resource, subprocess, sys
    done = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=int(sys.argv[1]))
    sys.stderr.write(done.stderr)
    sys.stdout.write(done.stdout)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(done.returncode, peak)
    """
)


def roses(*args: str | Path) -> tuple[int, str, str, int]:
    """``roses ARGS`` in a child process: exit code, stdout, stderr, peak RSS in KB.
    Past the guard the child is killed (the measuring process and its own child:
    a runaway left behind would eat the memory of the tests after it)."""
    command = [sys.executable, "-m", "roses_app.cli", *map(str, args)]
    measured = [sys.executable, "-c", _MEASURED, str(GUARD_S), *command]
    with subprocess.Popen(
        measured, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=GUARD_S + 30)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode != 0:  # the measuring process: roses ran past the guard
        pytest.fail(f"roses {' '.join(map(str, args))} did not finish:\n{stderr[-2000:]}")
    *out, last = stdout.rstrip("\n").split("\n")
    code, peak = last.split()
    return int(code), "\n".join(out), stderr, int(peak)


# -- refused, with the line ------------------------------------------------------------


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_roses_check_refuses_a_config_bomb_at_its_line(path: Path) -> None:
    code, _, err, peak = roses("check", "-c", path)
    expected = path.with_suffix(".expected").read_text().splitlines()
    problems = [
        line.removeprefix(f"{path}:") for line in err.splitlines() if line.startswith(f"{path}:")
    ]
    assert code == 2, err
    assert problems == expected
    assert f"1 problem(s) in {path}; nothing was started." in err
    assert peak < MAX_RSS_KB, f"{peak} KB"


def test_a_hundred_thousand_subscriptions_are_accepted(tmp_path: Path) -> None:
    """What costs is bounded, not how many streams there are: 100,000 keyword
    subscriptions (a subscriptions file of 9 MB) pass `roses check`, in a bounded
    memory (about 0.5 GB here; each stream's plan is built and checked)."""
    words = ["lava", "ash", "Reykjavík", "glacier", "quake", "flood", "storm", "ice"]
    shapes = [
        "contains(lower-case(title), '{0}{1}')",
        "contains(lower-case(.), '{0}') and contains(lower-case(title), '{1}')",
        "category = ('{0}', '{1}') or contains(title, '{0} {1}')",
        "not(contains(description, '{1}')) and starts-with(title, '{0}')",
    ]
    with open(tmp_path / "subs.jsonl", "w") as out:
        for k in range(100_000):
            where = shapes[k % 4].format(words[k % 8], f"{words[k // 8 % 8]}{k}")
            reads = ["a", "b", "c"][: 1 + k % 3]
            row = {"name": f"s{k}", "from": reads, "where": where, "publish": k % 2 == 0}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    (tmp_path / "feeds.yaml").write_text(
        "sources:\n"
        + "".join(f"  {s}: {{feed: 'file:{s}.xml'}}\n" for s in "abc")
        + "streams:\n  all: {union: [a, b, c]}\nsubscriptions: subs.jsonl\n"
    )
    code, out, err, peak = roses("check", "-c", tmp_path / "feeds.yaml")
    assert code == 0, err
    assert "OK (3 sources, 100001 streams)" in out
    assert peak < 1_500_000, f"{peak} KB"


def test_an_expression_too_long_or_too_deep_is_refused_at_its_line(tmp_path: Path) -> None:
    long = " or ".join(f"contains(title, 'w{i}')" for i in range(300))  # 8,000 characters
    deep = "(" * 1_500 + "true()" + ")" * 1_500  # 3,006: deeper than the parser goes
    text = (
        "sources: {src: {feed: 'file:feed.xml'}}\nstreams:\n"
        f'  ok: {{filter: {{from: src, where: "{long[:4_000].rsplit(" or ", 1)[0]}"}}}}\n'
        f'  long: {{filter: {{from: src, where: "{long}"}}}}\n'
        f'  deep: {{filter: {{from: src, where: "{deep}"}}}}\n'
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, tmp_path / "feeds.yaml")
    assert [(p.line, p.message) for p in info.value.problems] == [
        (
            4,
            f"filter.where is {len(long):,} characters long, more than the 5,000 of an XPath "
            "expression (the limit of feeds.yaml): split it between streams",
        ),
        (
            5,
            "filter.where nests too deeply for the XPath parser (parentheses, or terms "
            "joined by and/or): split it between streams",
        ),
    ]


def test_a_config_file_beyond_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "feeds.yaml"
    config.write_text("sources: {src: {feed: 'file:feed.xml'}}\nstreams: {}\n")
    monkeypatch.setattr(loader_module, "MAX_CONFIG_BYTES", 20)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    [problem] = info.value.problems
    assert (problem.file, problem.line) == (str(config), 0)
    assert problem.message.startswith("the config file has 52 bytes, more than the 20 it may have")


def test_the_limits_leave_room_for_ordinary_configs(tmp_path: Path) -> None:
    """Anchors for shared settings, 100 operators deep, a union of 2,000 sources."""
    names = [f"f{i}" for i in range(2000)]
    lines = ["settings:", "  fetch: &fetch {timeout: 30s}", "sources:"]
    lines += [f"  {n}: {{feed: 'file:{n}.xml'}}" for n in names]
    lines += ["streams:", "  b0: {union: [" + ", ".join(names) + "]}"]
    lines += [f"  b{i}: {{filter: {{from: b{i - 1}, where: 'true()'}}}}" for i in range(1, 100)]
    config = parse_config("\n".join(lines) + "\n", tmp_path / "feeds.yaml")
    assert len(config.streams) == 100 and len(config.sources) == 2000


# -- 2^N paths, N + 2 nodes: linear everywhere -----------------------------------------


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_a_doubling_config_passes_check_and_replays(path: Path, tmp_path: Path) -> None:
    """Every stream is the set union of b0 with itself, 2^N times over: by the seed's
    set union, b0's events once each (b0: every item of src, or δ⁺ of it: each item
    is new at its time)."""
    code, out, err, _ = roses("check", "-c", path)
    assert code == 0, err
    levels = int(path.stem.rsplit("_", 1)[1])
    assert f"OK (1 sources, {levels + 1} streams)" in out
    code, _, err, _ = roses(
        "replay", "-c", path, "--events", DATA / "events.jsonl", "--out", tmp_path,
        "--engine", "reference",
    )  # fmt: skip
    assert code == 0, err
    expected = (DATA / "expected.jsonl").read_text()
    written = {p.stem: p.read_text() for p in tmp_path.glob("*.jsonl")}
    assert written == {f"b{i}": expected for i in range(levels + 1)}


def test_explain_writes_a_shared_sub_plan_out_once() -> None:
    code, out, err, _ = roses("explain", "--logical-only", "-c", DATA / "good_union_60.yaml", "b60")
    assert code == 0, err
    written, _, rewritten = out.partition("== stream b60: rewritten plan")
    # one line per node and per edge to a node printed already, not 2^60
    assert written.count("Union ∪ of 2") == 2 * 60 - 1
    assert written.count("(the same sub-plan as above)") == 60
    assert "Filter σ where 'true()'" in rewritten and "Union" not in rewritten


_WALKS = textwrap.dedent(
    """
    import json, pickle
    from roses_app.algebra.planner.globalplan import (
        GlobalPlan, frontier_of, is_stateless, node_fingerprint, stream_fingerprint)
    from roses_app.algebra.plan.operators import Delta, Filter, Join, Source, Stream, Union
    from roses_app.algebra.planner.program import build_program
    from roses_app.algebra.reference.evaluator import RefInput, evaluate_streams
    from roses_app.algebra.planner.rewrite import rewrite_streams
    from roses_app.algebra.planner.stateless_tails import operator_count, spark_copies

    def doubling(levels, base, op):
        plans = [base]
        for _ in range(levels):
            plans.append(op(plans[-1]))
        return [Stream(f"b{i}", p) for i, p in enumerate(plans)]

    union = lambda p: Union((p, p))
    a = doubling(60, Filter(Source("src"), "true()"), union)
    b = doubling(60, Filter(Source("src"), "true()"), union)  # equal, no object shared
    top, other = a[-1].plan, b[-1].plan
    joins = doubling(60, Delta(Source("src")), lambda p: Join(p, p))
    rewritten = rewrite_streams(a)
    plan = GlobalPlan.of(a + joins)
    events = [RefInput("src", t, t, f"<item><guid>{t}</guid></item>") for t in (1, 2)]
    out = evaluate_streams(a[-1:], events)
    print(json.dumps({
        "equal": top == other and hash(top) == hash(other),
        "unequal": top != a[-2].plan,
        "ids": node_fingerprint(top) == node_fingerprint(other),
        "prints": stream_fingerprint(a[-1], ()) != stream_fingerprint(a[-2], ()),
        "pickled": pickle.loads(pickle.dumps(top)) == top,
        "walk": sum(1 for _ in top.walk()),
        "tree": top.tree_size,
        "stateless": is_stateless(top) and not is_stateless(joins[-1].plan),
        "rewritten": {s.plan == a[0].plan for s in rewritten} == {True},
        "nodes": len(plan.nodes),
        "frontier": [str(n) for n in frontier_of(joins[-1].plan)] == [str(Source("src"))],
        "copies": list(operator_count(joins[-1:]))[0][1],
        "delta": spark_copies(joins[-1:])[joins[0].plan],
        "steps": len(build_program([(s.plan, s.name) for s in a]).steps),
        "evaluated": [e.ts for e in out["b60"][""]],
    }))
    """
)


def test_every_walk_of_a_shared_plan_visits_each_node_once() -> None:
    """Equality, hash, fingerprints, pickling, rewriting, the global plan, its
    frontier, the fused program and the reference evaluator on 2^60 paths."""
    done = subprocess.run(
        [sys.executable, "-c", _WALKS], capture_output=True, text=True, timeout=GUARD_S
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got == {
        "equal": True,
        "unequal": True,
        "ids": True,
        "prints": True,
        "pickled": True,
        "walk": 62,  # 60 unions, the filter, the source
        "tree": 2**61 + 2**60 - 1,  # what a tree walk would visit
        "stateless": True,
        "rewritten": True,  # F ∪ F = F, 60 times
        "nodes": 62 + 61,  # the unions, filter, source; the joins and the delta
        "frontier": True,
        "copies": 2**61 - 1,  # what Spark would run (the config check refuses it)
        "delta": 2**60,  # the delta at the bottom, once per path
        "steps": 62,
        "evaluated": [1, 2],
    }


# -- what equality and fingerprints keep -----------------------------------------------


def test_every_node_type_compares_by_its_digest() -> None:
    """A node class declared with the dataclass's own eq (``@dataclass(frozen=True)``)
    would compare and hash by recursing through every path again."""
    for node_type in NODE_TYPES:
        assert node_type.__eq__ is Node.__eq__, node_type
        assert node_type.__hash__ is Node.__hash__, node_type


def test_equality_is_by_value_origins_aside() -> None:
    a = Filter(Source("s"), "title", origin=Origin("a.yaml", 3, "x", "x/filter"))
    b = Filter(Source("s"), "title", origin=Origin("b.yaml", 9, "y", "y/filter"))
    assert a == b and hash(a) == hash(b) and a.digest == b.digest
    assert a != Filter(Source("s"), "link") and a != Filter(Source("t"), "title")
    assert Union((a, b)) != Union((a,))
    # a field that ends where the next one starts does not make two nodes equal
    assert Filter(Source("ab"), "c") != Filter(Source("a"), "bc")


def test_walk_visits_a_node_object_once_and_equal_copies_each() -> None:
    shared = Filter(Source("s", origin=Origin(line=2)), "true()", origin=Origin(line=1))
    copy = Filter(Source("s", origin=Origin(line=4)), "true()", origin=Origin(line=3))
    lines = [n.origin.line for n in Union((shared, copy, shared), origin=Origin(line=9)).walk()]
    assert lines == [9, 1, 2, 3, 4]


def test_small_plans_keep_their_ids_and_large_ones_are_ids_of_their_digest() -> None:
    """Ids of plans written out in at most 1,000 nodes are those of their text, as
    before (stored versions and frontier keys stay valid); larger ones, hashed from
    their digest, are the same in every process."""
    small = Filter(Source("s"), "true()")
    assert node_fingerprint(small) == fingerprint(small)
    code = (
        "from roses_app.algebra.plan.operators import Filter, Source, Union\n"
        "from roses_app.algebra.planner.globalplan import node_fingerprint\n"
        "p = Filter(Source('s'), 'true()')\n"
        "for _ in range(20): p = Union((p, p))\n"
        "print(node_fingerprint(p))\n"
    )
    ids = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=GUARD_S,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(ids) == 1 and len(ids.pop().strip()) == 16


def test_a_pickled_plan_carries_no_cached_digest() -> None:
    plan = Union((Filter(Source("s"), "true()"), Source("t")))
    assert plan == Union((Filter(Source("s"), "true()"), Source("t")))  # computes the digest
    state = pickle.loads(pickle.dumps(plan)).__dict__
    assert "digest" not in state and "_hash" not in state
