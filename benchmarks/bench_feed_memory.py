#!/usr/bin/env python3
"""Benchmark: peak memory of `roses run` polling a 100,000-item feed again and again.

A feed server on 127.0.0.1 serves a valid RSS 2.0 feed of --items generated items (the
big feed of bench_hostile_memory.py, about 50 MB for 100,000) without validators, so
every poll fetches, parses and commits the whole document again.  `roses run` polls it
every --every (fixed), with a filter and a split published over it, until the server
has answered --polls GETs and the poll after them has started (each poll of a source
ends before the next begins) and the store holds what the feed should publish (or
--timeout has passed), then gets SIGTERM.  The RSS of the whole process tree
(driver, JVM, Spark's Python workers, the parse workers) is sampled every --sample
seconds and the driver's and JVM's own high-water marks (VmHWM) are read.

--before DIR runs the same first with the roses_app of DIR (a checkout of the code
before a change: `git worktree add DIR COMMIT`) ahead on PYTHONPATH, so one invocation
measures both on the same machine under the same load.

    .venv/bin/python benchmarks/bench_feed_memory.py --items 5000 --polls 2  # check
    .venv/bin/python benchmarks/bench_feed_memory.py [--items 100000] [--polls 3]
        [--every 20s] [--before DIR] [--max-bytes 200MB] [--master local[2]]
        [--timeout 1800] [--work DIR] [--keep]

Backs: docs/benchmarks.md, section 'A 100,000-item feed polled again and again' (the
table of peak memory before and after, and the wall time of the run).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import proctree
import scale_workload
from bench_hostile_memory import (
    FILTER_CATEGORY,
    FILTER_STREAM,
    MIB,
    SPLIT_STREAM,
    Expected,
    FeedServer,
    HighWaterSampler,
    mb,
    process_kinds,
    published,
    write_big_feed,
)
from bench_scale import roses_command
from benchlib import Row, add_master_and_seed, bench_parser, fill_defaults, fmt, report, work_folder

KINDS = ("driver", "jvm", "python workers", "parse workers", "other")
LEFT_OUT = re.compile(r"source big: the document has (\d+) entries: the first (\d+) are taken")


def taken(n: int, limit: int, seed: int) -> Expected:
    """What the streams must publish from the first `limit` entries of the document
    (write_big_feed writes item n-1 first: the newest)."""
    rng = random.Random(seed)
    made = [scale_workload.make_item(rng, i).xml for i in range(n)]
    expected = Expected(items=min(n, limit))
    for xml in made[max(0, n - limit) :]:
        categories = re.findall(r"<category>([^<]*)</category>", xml)
        expected.filtered += FILTER_CATEGORY in categories
        if categories:
            expected.split[categories[0].lower()] += 1
    return expected


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def config_text(data: Path, feed_port: int, args: argparse.Namespace) -> str:
    pairs = [setting.partition("=") for setting in args.conf]
    conf = ", ".join(f'"{key}": "{value}"' for key, _, value in pairs)
    return (
        "settings:\n"
        f"  data_dir: {data}\n"
        f"  http: {{host: 127.0.0.1, port: {free_port()}}}\n"
        f'  spark: {{master: "{args.master}", shuffle_partitions: 2, conf: {{{conf}}}}}\n'
        f"  fetch: {{timeout: 300s, max_bytes: {args.max_bytes}}}\n"
        "sources:\n"
        f'  big: {{feed: "http://127.0.0.1:{feed_port}/big.xml", every: {args.every}}}\n'
        "streams:\n"
        f"  {FILTER_STREAM}:\n"
        f"    filter: {{from: big, where: \"category = '{FILTER_CATEGORY}'\"}}\n"
        "    publish: true\n"
        f"  {SPLIT_STREAM}:\n"
        '    split: {from: big, by: "lower-case(category[1])"}\n'
        "    publish: true\n"
    )


class Sampler(HighWaterSampler):
    """HighWaterSampler that also keeps the highest PSS sum over the tree."""

    def __init__(self, root: int, every: float, kind: Callable[[int], str]) -> None:
        super().__init__(root, every, kind)
        self.pss_peak = 0

    def sample(self) -> None:
        super().sample()
        pids = [pid for pid in proctree.tree_pids(self.root) if self.kind and self.kind(pid)]
        self.pss_peak = max(self.pss_peak, sum(proctree.pss_bytes(pid) for pid in pids))


def kinds_of(root: int) -> Callable[[int], str]:
    """bench_hostile_memory's kinds, with the parse workers (and their fork server)
    told apart from "other"."""
    base = process_kinds(root)

    def kind(pid: int) -> str:
        label = base(pid)
        if label == "other":
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"multiprocessing" in fh.read():
                        return "parse workers"
            except OSError:
                return ""
        return label

    return kind


@dataclass
class Run:
    label: str
    wall: float
    code: int | None
    gets: int
    peak: int
    pss_peak: int
    peaks: dict[str, int]
    high: dict[tuple[int, str], int]
    left_out: list[tuple[int, int]]  # (entries in the document, taken) per poll logged
    errors: list[str]
    published: dict[tuple[str, str], int]


def outcome(
    published_: dict[tuple[str, str], int], expected: Expected
) -> tuple[dict[str, int], int, bool]:
    """The split feeds' counts, the filter's, and whether both are as expected."""
    filtered = published_.get((FILTER_STREAM, ""), 0)
    split = {part: n for (stream, part), n in published_.items() if stream == SPLIT_STREAM}
    return split, filtered, split == dict(expected.split) and filtered == expected.filtered


def so_far(store: Path) -> dict[tuple[str, str], int]:
    """What the store holds while the daemon writes it (nothing before its tables)."""
    try:
        return published(store)
    except sqlite3.OperationalError:  # no entries table yet, or locked: look again
        return {}


def run_daemon(
    label: str,
    folder: Path,
    server: FeedServer,
    args: argparse.Namespace,
    pythonpath: str | None,
    expected: Expected,
) -> Run:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    server.hits.clear()
    cmd = roses_command("run", "-c", str(folder / "feeds.yaml"))
    with open(folder / "stdout.txt", "w+") as out, open(folder / "stderr.txt", "w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=folder, stdout=out, stderr=err, env=env, start_new_session=True
        )
        sampler = Sampler(proc.pid, args.sample, kinds_of(proc.pid))
        sampler.start()
        try:
            # the polls measured, and what they publish in the store (a cold JVM on a
            # loaded machine may still be writing it when the last poll is made)
            store = folder / "data" / "store.sqlite"
            while proc.poll() is None and time.perf_counter() - started <= args.timeout:
                if server.hits["/big.xml"] > args.polls and outcome(so_far(store), expected)[2]:
                    break
                time.sleep(0.5)
            proctree.stop_tree(proc, grace=60.0)
        finally:
            wall = time.perf_counter() - started
            sampler.stop()
            proctree.stop_tree(proc, grace=2.0)
        err.seek(0)
        stderr = err.read()
    return Run(
        label,
        wall,
        proc.returncode,
        server.hits["/big.xml"],
        sampler.peak,
        sampler.pss_peak,
        dict(sampler.peaks),
        dict(sampler.high),
        [(int(a), int(b)) for a, b in LEFT_OUT.findall(stderr)],
        [line for line in stderr.splitlines() if "Traceback" in line or " ERROR " in line][:5],
        published(folder / "data" / "store.sqlite"),
    )


def describe(run: Run, expected: Expected) -> list[str]:
    kinds = sorted(run.peaks, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
    high = {k: max((v for (_, kind), v in run.high.items() if kind == k), default=0) for k in KINDS}
    split, filtered, same = outcome(run.published, expected)
    return [
        f"## {run.label}",
        f"- wall {fmt(run.wall)} s, exit {run.code}, GETs of the feed {run.gets}",
        f"- peak RSS of the process tree (sampled): {mb(run.peak)}; peak PSS: {mb(run.pss_peak)}",
        "- sampled peak per kind: " + "; ".join(f"{k} {mb(run.peaks[k])}" for k in kinds),
        "- highest VmHWM per kind: " + "; ".join(f"{k} {mb(v)}" for k, v in high.items() if v),
        f"- polls logged as cut (entries in the document, taken): {run.left_out}",
        f"- published: {sum(split.values()):,} items in {len(split)} split feeds, {filtered:,}"
        f" in the filter (expected {expected.split.total():,}, {len(expected.split)},"
        f" {expected.filtered:,}): " + ("as expected" if same else "DIFFERENT"),
        *(f"- error: {line.strip()}" for line in run.errors),
    ]


def run_row(run: Run, expected: Expected) -> Row:
    """A run's figures (MB: 2^20 bytes) as a table row."""
    high = {k: max((v for (_, kind), v in run.high.items() if kind == k), default=0) for k in KINDS}
    split, filtered, same = outcome(run.published, expected)
    return {
        "run": run.label, "wall s": run.wall, "exit": run.code, "GETs": run.gets,
        "peak RSS tree MB": round(run.peak / MIB), "peak PSS tree MB": round(run.pss_peak / MIB),
        **{f"VmHWM {kind} MB": round(v / MIB) for kind, v in high.items() if v},
        "published split": sum(split.values()), "published filter": filtered,
        "as expected": same,
    }  # fmt: skip


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, quick="a 2,000-item feed polled twice, every 5s")
    add = parser.add_argument
    add("--items", type=int, help="items of the big feed (default 100,000; --quick 2,000)")
    add("--polls", type=int, help="polls measured (default 3; --quick 2)")
    add("--every", help="the source's interval (default 20s; --quick 5s)")
    add("--max-items", type=int, default=10_000, help="fetch.max_items in force (expected)")
    add("--before", help="a checkout of the code before: measured first, on PYTHONPATH")
    add("--conf", action="append", default=[], help="KEY=VALUE: settings.spark.conf (again)")
    add("--max-bytes", default="200MB", help="settings.fetch.max_bytes (default 200MB)")
    add("--sample", type=float, default=0.1, help="seconds between memory samples (0.1)")
    add("--timeout", type=float, default=1800.0, help="seconds per run before it is stopped")
    add("--work", help="working folder (default: a new temporary one)")
    add("--keep", action="store_true", help="keep the working folder (feed, data, logs)")
    add_master_and_seed(parser)
    parser.set_defaults(master="local[2]")
    args = parser.parse_args(argv)
    fill_defaults(args, {"items": (2_000, 100_000), "polls": (2, 3), "every": ("5s", "20s")})
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    proctree.exit_on_sigterm()
    variants = [("before: " + args.before, args.before)] if args.before else []
    variants.append(("after: this working tree", None))
    runs: list[list[Run]] = []
    with work_folder("roses-feed-mem-", args.keep, args.work) as work:
        print(f"working in {work}", file=sys.stderr)
        write_big_feed(work / "big.xml", args.items, args.seed)
        expected = taken(args.items, args.max_items, args.seed)
        size = (work / "big.xml").stat().st_size / (1 << 20)
        with FeedServer({"/big.xml": (work / "big.xml", {})}) as server:
            for k in range(args.repeat):
                runs.append([])
                for n, (label, path) in enumerate(variants):
                    folder = work / f"run{k}-{n}"
                    folder.mkdir()
                    text = config_text(folder / "data", server.port, args)
                    (folder / "feeds.yaml").write_text(text)
                    print(f"running {label} ...", file=sys.stderr, flush=True)
                    runs[-1].append(run_daemon(label, folder, server, args, path, expected))
    report(
        args,
        f"roses run: a {args.items:,}-item feed ({size:,.1f} MB) polled every {args.every}",
        [[run_row(run, expected) for run in repeat] for repeat in runs],
        notes=[
            f"Load average {os.getloadavg()[0]:.2f} at the end.  Caveat: cores shared with "
            "other work: times vary widely, memory less so.  Spark master "
            f"{args.master}; {args.polls} polls measured; sampled every {args.sample:g} s.",
            "In full (the last repeat):\n\n"
            + "\n\n".join("\n".join(describe(run, expected)) for run in runs[-1]),
            "MB: 2^20 bytes.  Sampled peak: the highest RSS sum over the tree (or a kind) at "
            "one sample.  VmHWM: a process's own peak RSS (exact).  RSS counts pages a forked"
            " process shares with its parent in both; PSS (sampled too) shares them out.",
        ],
    )
    every = [run for repeat in runs for run in repeat]
    return 0 if all(r.code == 0 and r.gets > args.polls for r in every) else 1


if __name__ == "__main__":
    sys.exit(main())
