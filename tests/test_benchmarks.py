"""Every benchmark of benchmarks/ runs in its --quick mode and reports through the one
harness (benchmarks/benchlib.py, issue 45): a markdown table of named fields, then the
machine line, and with --json FILE the same rows as JSON with the machine.

Each benchmark runs as a user runs it (``python benchmarks/bench_X.py --quick --json
FILE``), in a subprocess; the test reads its JSON and its stdout.  The benchmarks that
start a JVM or a daemon (``jvm``) are marked ``e2e`` (``-m "not e2e"`` leaves them out
while developing); all of them go to one xdist group, ``benchmarks``, so that under
``--dist loadgroup`` two benchmarks never share the machine's two cores, and they run
beside the Spark tests' group instead of after it.  Network: 127.0.0.1 only.
"""

from __future__ import annotations

import json
import math
import platform
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import benchlib  # noqa: E402  (the harness, from the folder the benchmarks run from)

pytestmark = pytest.mark.xdist_group("benchmarks")


@dataclass(frozen=True)
class Case:
    script: str  # benchmarks/bench_<script>.py
    numbers: tuple[str, ...]  # fields that are a number in every row of the first table
    words: tuple[str, ...] = ()  # fields that are a text in every row
    args: tuple[str, ...] = ()  # beside --quick and --json
    jvm: bool = False  # starts a JVM (Spark) or a daemon: slow, marked e2e
    true: tuple[str, ...] = ()  # fields whose value must be True (the outputs checked)
    timeout: float = 600.0


CASES = (
    Case("algebra", ("items/s", "s", "outputs"), ("query", "engine"), jvm=True,
         true=("identical outputs",)),
    Case("compact", ("files merged", "wall s", "CPU s", "peak RSS MB"), ("code",)),
    Case("console", ("items spooled", "streams defined", "first preview ms", "p50 ms", "p99 ms"),
         args=("--only", "preview", "--spooled", "1000", "--streams", "1",
               "--keystrokes", "5", "--limit", "1000")),
    Case("dispatch", ("sources", "set-up s", "memory MB", "µs a poll"), ("way",)),
    Case("feed_memory", ("wall s", "GETs", "peak RSS tree MB", "peak PSS tree MB"), ("run",),
         jvm=True, true=("as expected",)),
    Case("fetch", ("fetches/s", "CPU µs a fetch"), ("transport",)),
    Case("floor", ("net s (median)", "net s (best of each)"), ("replay",), jvm=True),
    Case("hostile_memory", ("wall s", "peak RSS tree MB"), ("run",), jvm=True,
         true=("published as expected",)),
    Case("hub", ("subscribers", "verify all s", "deliveries", "SIGTERM to exit s"), jvm=True,
         true=("every subscriber got every change",)),
    Case("jit", ("start (10 events) s", "full s", "net s"), ("JIT",), jvm=True),
    Case("jvm_start", ("without archive s", "with archive s", "speed-up"), ("run",), jvm=True),
    Case("late_graph", ("N readers", "pairs", "this engine s", "baseline engine s"), jvm=True),
    Case("late_join", ("items/s", "pairs tested", "joined", "state MB"), ("variant",),
         true=("same joined items",)),
    Case("late_state", ("now items/s", "now kB a poll", "before items/s", "bytes ratio"),
         ("window",)),
    Case("lateness", ("categories ROSES", "categories Update", "count ROSES", "count Update"),
         ("window", "measure"), jvm=True),
    Case("native", ("s", "items/s", "rows"), ("way",), jvm=True),
    Case("presearch", ("observers", "build s", "match/s", "candidates")),
    Case("preview", ("items spooled", "streams defined", "first preview ms", "p50 ms")),
    Case("pull", ("items", "range read s", "whole spool s"), ("window",), true=("same items",)),
    Case("push", ("seen", "of"), ("path", "probes"), jvm=True),
    Case("pydaemon", ("start (10 events) s", "full s", "net s"), ("Python daemon",), jvm=True),
    Case("replay", ("reference items/s", "spark items/s", "spark / reference"),
         ("configuration", "pass"), jvm=True, true=("identical outputs",)),
    # one N (its --quick has two): check, explain, both engines, baselines, once
    Case("scale", ("N", "items"), ("measure",), args=("--subs", "10"), jvm=True),
    Case("serve", ("answered", "req/s", "p50 s", "renders"), ("mode",)),
    # the item-to-feed latency alone: the cold starts are two more daemons
    Case("service", ("probes", "seen", "p50 s", "p99 s"), ("path",),
         args=("--skip-shipped", "--skip-generated"), jvm=True),
    Case("shared", ("streams", "items", "s", "stateful operators"), ("configuration",),
         jvm=True),
    Case("sources", ("N", "polls due", "done", "start s (200)"), ("mode",), jvm=True),
    Case("startup", ("this tree s",), ("step",)),
    Case("trigger", ("trigger s", "batches", "JVM CPU s"), jvm=True),
    Case("websub", ("rounds", "p50 ms", "p90 ms", "max ms")),
    Case("xmlfn", ("items/s", "its items/s", "ratio"), ("measure", "first", "second")),
)  # fmt: skip


def free_port_base(count: int) -> int:
    """The first of `count` consecutive ports of 127.0.0.1 that are free now."""
    for base in range(24_000, 30_000, 50):
        with socket.socket() as probe:
            if all(probe.connect_ex(("127.0.0.1", base + k)) != 0 for k in range(count)):
                return base
    raise RuntimeError("no free range of ports")


def run_benchmark(case: Case, tmp_path: Path) -> tuple[dict[str, Any], str]:
    """(its JSON, its stdout) after ``bench_<script>.py --quick --json FILE``."""
    out = tmp_path / "results.json"
    args = list(case.args)
    if case.script == "fetch":  # its feed farm listens on --port-base and the next ports
        args += ["--port-base", str(free_port_base(4))]
    command = [sys.executable, str(BENCHMARKS / f"bench_{case.script}.py"), "--quick"]
    done = subprocess.run(
        [*command, "--json", str(out), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=case.timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return json.loads(out.read_text()), done.stdout


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def cases() -> list[Any]:
    return [
        pytest.param(case, id=case.script, marks=[pytest.mark.e2e] if case.jvm else [])
        for case in CASES
    ]


@pytest.mark.parametrize("case", cases())
def test_quick_run_reports_through_the_harness(case: Case, tmp_path: Path) -> None:
    found, stdout = run_benchmark(case, tmp_path)
    rows = found["rows"]
    assert rows, f"bench_{case.script}.py measured nothing"
    for row in rows:
        assert all(is_number(row.get(name)) for name in case.numbers), (case.numbers, row)
        assert all(isinstance(row.get(name), str) for name in case.words), (case.words, row)
        assert all(row.get(name) is True for name in case.true), (case.true, row)
    # the first table as the harness prints it: its header names the JSON's fields
    columns = list(dict.fromkeys(key for row in rows for key in row))
    header = "| " + " | ".join(columns) + " |"
    lines = stdout.splitlines()
    assert header in lines, f"no table header {header!r} in:\n{stdout[-3000:]}"
    body = lines[lines.index(header) + 2 : lines.index(header) + 2 + len(rows)]
    assert all(line.count(" | ") == len(columns) - 1 for line in body), body
    machine = found["machine"]
    assert machine["nproc"] >= 1 and machine["memory_gib"] > 0, machine
    assert machine["python"] == platform.python_version()
    assert machine["caveat"] in lines, "the machine line is not printed"
    assert f"{machine['nproc']} (of {machine['cpus']} CPUs, {machine['cpu_model']})" in stdout
    assert found["benchmark"] == f"bench_{case.script}"
    assert found["repeat"] == len(found["runs"]) >= 1


def test_every_benchmark_has_a_quick_run() -> None:
    scripts = {path.stem.removeprefix("bench_") for path in BENCHMARKS.glob("bench_*.py")}
    assert scripts == {case.script for case in CASES}


BACKS = re.compile(r"^Backs: (.+?)(?:\n\n|\Z)", re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("bench_*.py")), ids=lambda p: p.stem)
def test_every_benchmark_says_which_figure_it_backs(script: Path) -> None:
    """A "Backs:" paragraph in the module docstring, naming pages that exist."""
    source = script.read_text()
    docstring = source.split('"""')[1]
    found = BACKS.search(docstring)
    assert found, f"{script.name}: no 'Backs:' paragraph in its docstring"
    for page in re.findall(r"docs/[\w-]+\.md", found.group(1)):
        assert (REPO / page).is_file(), f"{script.name} names {page}, which does not exist"
    command = f"benchmarks/{script.name}"
    mentioned = any(command in page.read_text() for page in (REPO / "docs").glob("*.md"))
    assert mentioned, f"no page of docs/ mentions {command}"


def test_repeat_reports_the_median_and_the_spread(tmp_path: Path) -> None:
    """--repeat 3 of a fast benchmark: every run's rows, each figure their median."""
    out = tmp_path / "results.json"
    script = BENCHMARKS / "bench_late_state.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--repeat", "3", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["repeat"] == 3 and len(found["runs"]) == 3
    for i, row in enumerate(found["rows"]):
        values = sorted(run[i]["now items/s"] for run in found["runs"])
        assert row["now items/s"] == values[1]
        assert found["spread"][i]["now items/s"] == [values[0], values[2]]


def test_combine_takes_medians_and_keeps_texts() -> None:
    runs = [
        [{"way": "a", "s": 1.0, "n": 10, "same": True}],
        [{"way": "a", "s": 3.0, "n": 30, "same": True}],
        [{"way": "a", "s": 2.0, "n": 21, "same": False}],
    ]
    rows, spreads = benchlib.combine(runs)
    assert rows == [{"way": "a", "s": 2.0, "n": 21, "same": True}]
    assert spreads == [{"s": [1.0, 3.0], "n": [10, 30]}]


def test_the_table_aligns_numbers_and_shows_spreads() -> None:
    rows = [{"way": "cached", "req/s": 1234, "p50 s": 0.125, "note": None}]
    lines = benchlib.table(rows, [{"req/s": [1000, 1500]}])
    assert lines == [
        "| way | req/s | p50 s | note |",
        "|---|---:|---:|---|",
        "| cached | 1,234 (1,000-1,500) | 0.12 | - |",
    ]


def test_the_harness_options() -> None:
    parser = benchlib.bench_parser("doc")
    args = parser.parse_args(["--quick", "--repeat", "2", "--json", "out.json"])
    assert (args.quick, args.repeat, args.json) == (True, 2, Path("out.json"))
    assert parser.parse_args([]).repeat == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeat", "0"])
    own = benchlib.bench_parser("doc", quick=None, repeat=None)
    own.add_argument("--repeat", type=int, default=5)  # a benchmark's own, kept
    assert own.parse_args([]).repeat == 5 and not hasattr(own.parse_args([]), "quick")
