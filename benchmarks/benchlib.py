"""Command-line and report helpers shared by the benchmarks.

Imported by the benchmarks in this folder (run as `python benchmarks/X.py`, which puts the
folder on sys.path)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
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
