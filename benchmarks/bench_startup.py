#!/usr/bin/env python3
"""Benchmark: what N subscriptions cost before the first item, this tree against a
baseline commit, side by side in one run.

For N keyword subscriptions (default 10,000; the realistic workload of
``scale_workload.py``) plus one split stream, it times, each step in a fresh
subprocess per tree (this working tree, and ``--baseline`` checked out in a temporary
git worktree), ``--repeat`` times (default 3; the table gives the best):

  load     ``load_config``: YAML, the typed config, every XPath syntax-checked
  plan     the streams rewritten into the global plan and its fused program
  ship     the observers' analyses made ready to send with the stage (trees that
           ship them; reading the config made them)
  compile  what a Spark worker does before its first item, knowing only what it is
           sent: the fused program's presearchers and functions
           (``roses_app.xmlfn.fused.compiled``)
  batch    a first batch of 2,000 items through the fused program (the functions the
           items need are compiled then, where the tree compiles lazily)

Figures depend on the machine (2 cores here): run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_startup.py [--subs 10000] [--baseline bd3a1ca]

Backs: docs/benchmarks.md, 'The commands' (10,000 subscriptions before the first item,
against a baseline commit); no page quotes its figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import Row, baseline_worktree, bench_parser, fill_defaults, report
from scale_workload import (
    config_text,
    generate_items,
    generate_subscriptions,
    spark_settings,
    write_events,
)

ROOT = Path(__file__).resolve().parent.parent
STEPS = ("load", "plan", "ship", "compile", "batch")

# Run in a subprocess whose sys.path starts with the tree under test.
MEASURE = """
import json, sys, time
config_path, events_path = sys.argv[1], sys.argv[2]
times = {}
started = time.perf_counter()
from roses_app.config import load_config
config = load_config(config_path)
times["load"] = time.perf_counter() - started
started = time.perf_counter()
try:
    from roses_app.algebra.planner.program import build_program
    from roses_app.algebra.planner.rewrite import rewrite_streams
except ImportError:  # a tree from before algebra/ had packages (the baseline)
    from roses_app.algebra.program import build_program
    from roses_app.algebra.rewrite import rewrite_streams
ns = config.settings.namespaces
streams = rewrite_streams([s.stream for s in config.streams.values()], ns)
program = build_program([(s.plan, s.name) for s in streams], ns)
times["plan"] = time.perf_counter() - started
from roses_app.xmlfn import fused, presearch_terms
shipped = getattr(presearch_terms, "shipped", None)  # a tree that ships analyses
started = time.perf_counter()
if hasattr(fused, "shipped_analyses"):  # what the Spark stage sends
    sent = fused.shipped_analyses(program)
elif shipped:  # a tree from before that function: the same, written out
    sent = shipped((step.arg for step in program.steps if step.kind == "filter"), ns)
else:
    sent = b""
times["ship"] = time.perf_counter() - started
# from here a worker, which knows only what it is sent (the driver's memo goes)
getattr(presearch_terms, "_known", {}).clear()
from roses_app.heap import collector_paused
from roses_app.xmlfn.fused import compiled, run_program
started = time.perf_counter()
if shipped:
    presearch_terms.remember(program.key, sent)
with collector_paused():  # as the Spark stage runs its first batch
    compiled(program)
times["compile"] = time.perf_counter() - started
events = [json.loads(line) for line in open(events_path)]
started = time.perf_counter()
rows = run_program(
    program,
    [e["source"] for e in events],
    [e["ts"] for e in events],
    list(range(1, len(events) + 1)),
    [e["item"] for e in events],
)
times["batch"] = time.perf_counter() - started
times["rows"] = len(rows)
import roses_app
assert roses_app.__file__.startswith(sys.argv[3]), roses_app.__file__  # the tree measured
print(json.dumps(times))
"""


def measure(tree: Path, config: Path, events: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(config), str(events), str(tree)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
    )
    if done.returncode:
        raise SystemExit(f"measuring {tree} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = bench_parser(__doc__, repeat=None)
    add = parser.add_argument
    add("--subs", type=int, help="subscriptions (default 10,000; --quick 100)")
    add("--items", type=int, help="items of the first batch (default 2,000; --quick 100)")
    add("--baseline", default="bd3a1ca", help="the commit to compare with")
    add("--repeat", type=int, help="runs of each tree, the best kept (default 3; --quick 1)")
    add("--seed", type=int, default=7)
    args = parser.parse_args()
    fill_defaults(args, {"subs": (100, 10_000), "items": (100, 2_000), "repeat": (1, 3)})

    with tempfile.TemporaryDirectory(prefix="roses-startup-") as tmp:
        work = Path(tmp)
        config = work / "feeds.yaml"
        subs = generate_subscriptions(args.subs, args.seed)
        config.write_text(config_text(subs, work / "feeds", spark_settings(work / "d", "local[2]")))
        events = work / "events.jsonl"
        write_events(generate_items(args.items, args.seed), events)
        with baseline_worktree(ROOT, args.baseline, work / "baseline") as baseline:
            trees = {"this tree": ROOT, f"baseline {args.baseline}": baseline}
            best: dict[str, dict[str, float]] = {}
            for _ in range(args.repeat):
                for name, tree in trees.items():  # alternated: load drifts hit both
                    got = measure(tree, config, events)
                    mine = best.setdefault(name, got)
                    for step in STEPS:
                        mine[step] = min(mine[step], got[step])
                    if got["rows"] != mine["rows"]:
                        raise SystemExit(f"{name}: the first batch's rows changed between runs")
    names = list(best)
    rows: list[Row] = []
    for step in (*STEPS, "total"):
        values = [
            sum(best[n][s] for s in STEPS) if step == "total" else best[n][step] for n in names
        ]
        ratio = values[1] / values[0] if values[0] else None
        rows.append({"step": step, **{f"{n} s": v for n, v in zip(names, values, strict=True)},
                     "ratio": ratio})  # fmt: skip
    same = best[names[0]]["rows"] == best[names[1]]["rows"]
    report(
        args,
        f"{args.subs:,} subscriptions + 1 split before the first item: this tree vs "
        f"{args.baseline}",
        [rows],
        notes=[f"A first batch of {args.items:,} items, best of {args.repeat}; same rows from "
               f"the first batch: {same} ({int(best[names[0]]['rows']):,})."],
    )  # fmt: skip


if __name__ == "__main__":
    main()
