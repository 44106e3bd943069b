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

Backs: docs/benchmarks.md, section 'Compacting the spool's archive' (time, CPU and peak
memory of 30,000 one-poll files merged, this tree vs an older spool.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchlib import Row, bench_parser, fill_defaults, repeated, report

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


def measure(feeds: int, before: str | None) -> list[Row]:
    """One archive of `feeds` files merged by this tree's code (and `before`'s)."""
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "tree"
        make_archive(first, feeds)
        ways = [("this tree", first, "tree")]
        if before:
            second = Path(tmp) / "before"
            shutil.copytree(first, second)
            ways.append(("before", second, str(Path(before).resolve())))
        rows = []
        for label, root, module in ways:
            merged, wall, cpu, peak = merge(root, module)
            rows.append({"code": label, "files merged": int(merged), "wall s": float(wall),
                         "CPU s": float(cpu), "peak RSS MB": int(peak)})  # fmt: skip
        return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--feeds", type=int, help="archived files (default 10,000; --quick 200)")
    parser.add_argument("--before", help="an older spool.py, run side by side")
    args = parser.parse_args(argv)
    fill_defaults(args, {"feeds": (200, 10_000)})
    title = f"Compacting the spool's archive: {args.feeds:,} files, {args.feeds * 20:,} items"
    report(args, title, repeated(args, lambda: measure(args.feeds, args.before)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
