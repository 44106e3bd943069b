#!/usr/bin/env python3
"""Benchmark: compacting the spool's archive (what the daemon does every
``settings.spool.compact_every``, 10 minutes by default), in a child process each.

It writes a spool of --feeds polls of 20 items each (one file a poll, as a first
round of new feeds makes them), moves the files to the archive as Spark does once it
has committed them, and merges them: time, CPU and the child's peak RSS.  With
``--before FILE`` (an older ``roses_app/spool.py``, e.g. ``git show
REV:roses_app/spool.py > FILE``) the same archive is merged by that code too, side by
side.  No network.

    .venv/bin/python benchmarks/bench_compact.py [--feeds 10000] [--before FILE]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

CHILD = r"""
import importlib.util, resource, sys, time
from pathlib import Path
root, module = Path(sys.argv[1]), sys.argv[2]
if module == "tree":
    from roses_app.spool import compact_archive
else:
    spec = importlib.util.spec_from_file_location("roses_app.spool_before", module)
    code = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = code
    spec.loader.exec_module(code)
    compact_archive = code.compact_archive
started, cpu = time.perf_counter(), time.process_time()
merged = compact_archive(root / "archive", root / "tmp", 2)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{merged} {time.perf_counter() - started:.2f} {time.process_time() - cpu:.2f} {peak:.0f}")
"""


def make_archive(root: Path, feeds: int) -> int:
    from roses_app.spool import Spool

    spool = Spool(root)
    for n in range(feeds):
        items = [
            (f"<item><title>Feed {n} item {k}: a synthetic title of some words</title>"
             f"<link>http://127.0.0.1:9000/i/{n}/{k}</link><description>Item {k} of feed "
             f"{n}, about the lantern and the garden.</description><guid>g{n}-{k}</guid>"
             "</item>", None)
            for k in range(20)
        ]  # fmt: skip
        spool.append_many([(f"f{n}", items)])
    for path in sorted(spool.log_dir.glob("*.jsonl")):
        target = spool.archive_dir / str(path.parent).lstrip("/") / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)
    spool.close()
    return sum(p.stat().st_size for p in (root / "archive").rglob("*.jsonl"))


def merge(root: Path, module: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), module],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.split()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--before", help="an older spool.py, run side by side")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "tree"
        size = make_archive(first, args.feeds)
        ways = [("this tree", first, "tree")]
        if args.before:
            second = Path(tmp) / "before"
            shutil.copytree(first, second)
            ways.append(("before", second, str(Path(args.before).resolve())))
        print(f"{args.feeds:,} archived files, {args.feeds * 20:,} items, {size / 1e6:.0f} MB")
        print("| code | files merged | wall s | CPU s | peak RSS MB |")
        print("|---|---:|---:|---:|---:|")
        for label, root, module in ways:
            merged, wall, cpu, peak = merge(root, module)
            print(f"| {label} | {int(merged):,} | {wall} | {cpu} | {peak} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
