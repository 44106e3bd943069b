"""The harness every benchmark goes through, and helpers they share.

Every benchmark (run as `python benchmarks/X.py`, which puts this folder on sys.path)
makes its parser with :func:`bench_parser` (--quick: a tiny configuration; --repeat N:
the measurement N times, each figure their median with its spread; --json FILE: the
results as JSON too) and prints its results with :func:`report`: a markdown table of
rows with named fields, then the machine line (:func:`machine`)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose --help shows the script's docstring as it is written."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_master_and_seed(parser: argparse.ArgumentParser) -> None:
    """--master (the Spark master) and --seed (of the generated items)."""
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--seed", type=int, default=42)


def fill_defaults(args: argparse.Namespace, defaults: Mapping[str, tuple[Any, Any]]) -> None:
    """Set each option of `defaults`, name: (its value with --quick, without), that the
    command line left out (None)."""
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)


@contextmanager
def work_folder(prefix: str, keep: bool, folder: str | None = None) -> Iterator[Path]:
    """`folder`, or a new temporary folder named prefix...; removed at the end of the
    block unless keep."""
    work = Path(folder) if folder else Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


@contextmanager
def baseline_worktree(repo: Path, commit: str, folder: Path) -> Iterator[Path]:
    """``commit`` of ``repo`` checked out in a git worktree at ``folder`` (to run a
    baseline beside this tree), removed at the end of the block."""
    git = ["git", "-C", str(repo), "worktree"]
    subprocess.run([*git, "add", "--detach", str(folder), commit], check=True, capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run([*git, "remove", "--force", str(folder)], check=True, capture_output=True)


def fmt(value: float | None, spec: str = "") -> str:
    """A table cell: "-" for None; by default seconds, two decimals below 10, one above."""
    if value is None:
        return "-"
    return format(value, spec or (".2f" if value < 10 else ",.1f"))


def with_spark_setting(config: Path, entry: str, name: str) -> Path:
    """A copy of ``config`` named ``name`` beside it, with ``entry`` (``key: value``)
    added to ``settings.spark`` (a line edit: a YAML round trip would turn the joins'
    ``on:`` keys into booleans)."""
    lines = config.read_text().splitlines()
    spark = [i for i, line in enumerate(lines) if re.match(r"\s+spark: \{.*\}\s*$", line)]
    if spark:
        i = spark[0]
        lines[i] = lines[i].rstrip()[:-1].rstrip() + f", {entry}}}"
    else:
        start = next((i for i, line in enumerate(lines) if line == "settings:"), None)
        if start is None:  # a one-line mapping, or none
            flow = [i for i, line in enumerate(lines) if line.startswith("settings: {")]
            if not flow:
                raise SystemExit(f"{config}: no settings block to edit")
            i = flow[0]
            lines[i] = lines[i].replace("{", f"{{spark: {{{entry}}}, ", 1)
        else:
            lines.insert(start + 1, f"  spark: {{{entry}}}")
    copy = config.with_name(name)
    copy.write_text("\n".join(lines) + "\n")
    return copy


def timed(command: Sequence[str], cwd: Path, env: dict[str, str], clear: Path | None) -> float:
    """Seconds ``command`` took (``clear``: a folder removed first, e.g. a data folder);
    a failure ends the benchmark with its stderr (`roses once`'s 1, a source that
    failed, is none)."""
    if clear is not None:
        shutil.rmtree(clear, ignore_errors=True)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return took


# -- the harness: the options, the table, the machine line and the JSON of every benchmark --

Row = dict[str, Any]

# the load average when the benchmark started (this module is imported first)
_START_LOAD = os.getloadavg()[0]

QUICK_HELP = "a tiny configuration that finishes fast (a smoke run: its figures mean little)"


def bench_parser(
    doc: str | None, *, quick: str | None = QUICK_HELP, repeat: int | None = 1
) -> argparse.ArgumentParser:
    """argument_parser with the options every benchmark has: --quick, --repeat, --json.

    quick=None: the benchmark defines its own --quick; repeat=None: its own --repeat
    (it repeats inside its measurement and reports medians or bests itself)."""
    parser = argument_parser(doc)
    add_harness_options(parser, quick=quick, repeat=repeat)
    return parser


def add_harness_options(
    parser: argparse.ArgumentParser, *, quick: str | None = QUICK_HELP, repeat: int | None = 1
) -> None:
    add = parser.add_argument
    if quick is not None:
        add("--quick", action="store_true", help=quick)
    if repeat is not None:
        add(
            "--repeat",
            type=_positive,
            default=repeat,
            metavar="N",
            help=f"run the measurement N times: each figure is their median, with its "
            f"spread (min-max) (default {repeat})",
        )
    add("--json", type=Path, metavar="FILE", help="also write the results to FILE as JSON")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def repeated(args: argparse.Namespace, measure: Callable[[], Sequence[Row]]) -> list[list[Row]]:
    """Each run's rows, from `measure` called --repeat times."""
    return [list(measure()) for _ in range(args.repeat)]


def machine_info() -> dict[str, Any]:
    """What the figures depend on: CPUs (usable, all, model), memory, load, Python, OS."""
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as fh:
        memory = dict(line.split(":", 1) for line in fh)
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor() or "unknown",
        "memory_gib": round(int(memory["MemTotal"].split()[0]) / 2**20, 1),
        "load_average_at_start": round(_START_LOAD, 2),
        "python": sys.version.split()[0],
        "os": f"{platform.system()} {platform.release()}",
    }


def machine() -> str:
    """The machine line printed under every benchmark's table."""
    m = machine_info()
    return (
        f"Machine: nproc {m['nproc']} (of {m['cpus']} CPUs, {m['cpu_model']}), "
        f"{m['memory_gib']:.1f} GiB RAM, load average {m['load_average_at_start']:.2f} at the "
        f"start; Python {m['python']}; {m['os']}.  Figures depend on the machine: shared "
        "machines and other load change them; run twice and quote the second run."
    )


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def combine(runs: Sequence[Sequence[Row]]) -> tuple[list[Row], list[Row]]:
    """(the rows with each numeric field the median of the runs' values, and each row's
    spread: field -> [min, max]).  Rows are matched by position; a field that is not a
    number in every run keeps its first run's value."""
    rows: list[Row] = []
    spreads: list[Row] = []
    for i, first in enumerate(runs[0]):
        row, spread = dict(first), {}
        for key, value in first.items():
            values: list[Any] = [run[i].get(key) for run in runs if i < len(run)]
            if _numeric(value) and len(values) > 1 and all(map(_numeric, values)):
                median = statistics.median(values)
                row[key] = int(median) if all(isinstance(v, int) for v in values) else median
                spread[key] = [min(values), max(values)]
        rows.append(row)
        spreads.append(spread)
    return rows, spreads


def cell(value: Any, spread: Sequence[Any] | None = None) -> str:
    """A table cell: integers with thousands separators, floats as fmt() does, None "-";
    with a spread, "median (min-max)"."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not _numeric(value):
        return str(value)
    text = f"{value:,}" if isinstance(value, int) else fmt(value)
    if spread is not None and spread[0] != spread[1]:
        text += f" ({cell(spread[0])}-{cell(spread[1])})"
    return text


def table(rows: Sequence[Row], spreads: Sequence[Row] = ()) -> list[str]:
    """The rows as a markdown table: a column per field (in their first order), the
    numeric columns right-aligned."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    numeric = {c for c in columns if any(_numeric(row.get(c)) for row in rows)}
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "".join("---:|" if c in numeric else "---|" for c in columns),
    ]
    for i, row in enumerate(rows):
        spread = spreads[i] if i < len(spreads) else {}
        cells = [cell(row.get(c), spread.get(c)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


Section = tuple[str, Sequence[Sequence[Row]]]  # (a table's title, each run's rows)


def report(
    args: argparse.Namespace,
    title: str,
    runs: Sequence[Sequence[Row]],
    notes: Sequence[str] = (),
    sections: Sequence[Section] = (),
) -> list[Row]:
    """Print the results as every benchmark does (a heading, the markdown table, notes,
    the tables of further `sections`, the machine line), write them to --json FILE if
    given, and return the rows.

    runs: each run's rows (one run: [rows]); with several, each figure is their median."""
    printed: list[dict[str, Any]] = []
    for heading, its_runs in ((title, runs), *sections):
        if not its_runs or not its_runs[0]:
            raise SystemExit(f"{heading}: nothing was measured")
        rows, spreads = combine(its_runs)
        print(f"\n## {heading}\n")
        print("\n".join(table(rows, spreads if len(its_runs) > 1 else ())))
        if not printed:
            for note in notes:
                print(f"\n{note}")
        printed.append(_as_json(heading, its_runs, rows, spreads))
    print(f"\n{machine()}", flush=True)
    if getattr(args, "json", None):
        write_json(args.json, printed[0], printed[1:], notes)
    first: list[Row] = printed[0]["rows"]
    return first


def _as_json(
    title: str, runs: Sequence[Sequence[Row]], rows: Sequence[Row], spreads: Sequence[Row]
) -> dict[str, Any]:
    return {
        "title": title,
        "repeat": len(runs),
        "rows": list(rows),
        "spread": list(spreads) if len(runs) > 1 else [],
        "runs": [list(run) for run in runs],
    }


def write_json(
    path: Path, main: dict[str, Any], sections: Sequence[dict[str, Any]], notes: Sequence[str]
) -> None:
    """The results as JSON: the main table's rows (medians), their spreads and every
    run's rows; the further tables the same way; the notes, the command, the machine."""
    document = {
        "benchmark": Path(sys.argv[0]).stem,
        **main,
        "notes": list(notes),
        "sections": list(sections),
        "command": [Path(sys.executable).name, *sys.argv],
        "machine": {**machine_info(), "caveat": machine()},
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
