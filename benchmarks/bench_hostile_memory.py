#!/usr/bin/env python3
"""Benchmark: peak memory of `roses once` while a stacked-gzip bomb and a big feed are polled.

A feed server on 127.0.0.1 serves a response with `Content-Encoding: gzip, gzip` holding
--bomb-gb GiB of zeros (default 4; a few KB on the wire, never built in memory) and a
valid RSS 2.0 feed of --items realistic generated items (default 100,000, about 50 MB;
the items of scale_workload.py).  `roses once` runs twice, each on a fresh data_dir in a
session of its own, with fetch.max_bytes --max-bytes (default 200MB: the feed fits, the
bomb does not) and Spark master --master (default local[2]): the baseline polls the big
feed alone, the hostile run the bomb too.  Both have a filter (`category = 'science'`)
and a split by the first category, published, over the big feed (hostile: the union of
both sources).  The RSS of the whole process tree (Python driver, JVM, Spark's Python
workers) is sampled every --every seconds, and the driver's and the JVM's own high-water
marks (VmHWM) are read.  Printed per run: wall time, peak RSS (tree, per kind), the
summary line, whether the bomb was refused by the size cap (its log line), the items
published (from the store, against the counts expected from the generated items); then
the hostile run's excess over the baseline.

    .venv/bin/python benchmarks/bench_hostile_memory.py --items 5000 --bomb-gb 0.25  # check
    .venv/bin/python benchmarks/bench_hostile_memory.py [--items 100000] [--bomb-gb 4]
        [--max-bytes 200MB] [--master local[2]] [--timeout 1800] [--work DIR] [--keep]

Backs: docs/benchmarks.md, 'The commands' (no page quotes its figures; docs/operating.md
says fetch.max_bytes bounds a document, without one); it makes the big feed of section 'A
100,000-item feed polled again and again', which bench_feed_memory.py measures.
"""

from __future__ import annotations

import argparse
import http.server
import os
import random
import re
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import proctree
import scale_workload
from bench_scale import roses_command
from benchlib import Row, add_master_and_seed, bench_parser, fill_defaults, fmt, report, work_folder

MIB = 1 << 20
FILTER_CATEGORY = "science"
FILTER_STREAM, SPLIT_STREAM = "science", "by-category"
KINDS = ("driver", "jvm", "python workers", "other")
SUMMARY = re.compile(r"^sources=\d+ .*$", re.MULTILINE)

# -- the served documents ---------------------------------------------------------------


@dataclass
class Expected:
    """What the streams must publish from the big feed."""

    items: int = 0
    filtered: int = 0  # items with the filter's category
    split: Counter[str] = field(default_factory=Counter)  # items per first category


def write_big_feed(path: Path, n: int, seed: int) -> Expected:
    """An RSS 2.0 document of n generated items, newest first; the expected outputs."""
    rng = random.Random(seed)
    items = [scale_workload.make_item(rng, i).xml for i in range(n)]
    expected = Expected(items=n)
    for xml in items:
        categories = re.findall(r"<category>([^<]*)</category>", xml)
        expected.filtered += FILTER_CATEGORY in categories
        if categories:  # an item without one is routed nowhere
            expected.split[categories[0].lower()] += 1
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('<?xml version="1.0" encoding="utf-8"?>\n<rss version="2.0"><channel>')
        fh.write("<title>Big feed</title><link>https://big.example/</link>")
        fh.write("<description>Generated feed</description>\n")
        for xml in reversed(items):
            fh.write(xml + "\n")
        fh.write("</channel></rss>\n")
    return expected


def write_bomb(path: Path, mib: int) -> int:
    """gzip(gzip(mib MiB of zeros)), written as it is made; its size in bytes.

    The inner gzip is raw deflate of 1 MiB of zeros ended by a full flush: the flush
    resets the compressor, so that block is the same bytes for every MiB and is made
    once; only the CRC runs over every zero.  The outer gzip compresses that stream
    as it goes.  Nothing near the expanded size is ever held."""
    zeros = bytes(MIB)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = deflater.compress(zeros) + deflater.flush(zlib.Z_FULL_FLUSH)
    final = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)  # last, empty block
    outer = zlib.compressobj(9, zlib.DEFLATED, 31)
    crc, written = 0, 0
    with open(path, "wb") as fh:

        def put(data: bytes) -> None:
            nonlocal written
            out = outer.compress(data)
            fh.write(out)
            written += len(out)

        put(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")  # gzip header: deflate, no name
        for _ in range(mib):
            put(block)
            crc = zlib.crc32(zeros, crc)
        put(final + struct.pack("<II", crc, (mib * MIB) & 0xFFFFFFFF))
        tail = outer.flush()
        fh.write(tail)
    return written + len(tail)


class FeedServer:
    """http.server on 127.0.0.1 serving files: path -> (file, extra headers); counts GETs."""

    def __init__(self, routes: dict[str, tuple[Path, dict[str, str]]]) -> None:
        self.hits: Counter[str] = Counter()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                route = routes.get(self.path)
                server.hits[self.path] += 1
                if route is None:
                    self.send_error(404)
                    return
                file, headers = route
                self.send_response(200)
                self.send_header("Content-Type", "application/rss+xml")
                self.send_header("Content-Length", str(file.stat().st_size))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                try:
                    with open(file, "rb") as fh:
                        while chunk := fh.read(MIB):
                            self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the fetcher gave up (the size cap): nothing more to send

            def log_message(self, format: str, *args: object) -> None:
                return  # no access log on the benchmark's output

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FeedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def config_text(data: Path, port: int, bomb: bool, args: argparse.Namespace) -> str:
    base = f"http://127.0.0.1:{port}"
    origin = "{union: [big, bomb]}" if bomb else "big"
    lines = [
        "settings:",
        f"  data_dir: {data}",
        f'  spark: {{master: "{args.master}", shuffle_partitions: 2}}',
        f"  fetch: {{timeout: {args.fetch_timeout}, max_bytes: {args.max_bytes}}}",
        "sources:",
        f'  big: {{feed: "{base}/big.xml"}}',
        *([f'  bomb: {{feed: "{base}/bomb.xml"}}'] if bomb else []),
        "streams:",
        f"  {FILTER_STREAM}:",
        f"    filter: {{from: {origin}, where: \"category = '{FILTER_CATEGORY}'\"}}",
        "    publish: true",
        f"  {SPLIT_STREAM}:",
        f'    split: {{from: {origin}, by: "lower-case(category[1])"}}',
        "    publish: true",
    ]
    return "\n".join(lines) + "\n"


# -- the measured run ---------------------------------------------------------------------


def cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return None  # gone meanwhile


def process_kinds(root: int) -> Callable[[int], str]:
    """pid -> driver, jvm (Spark's), python workers (pyspark daemon and workers), other
    (spark-class shells, the launcher JVM...); "" for a fork of the driver that has not
    exec'd yet (its pages are the driver's: counting them would count the driver twice).

    Looked up at every sample: a pid changes kind when it execs (driver fork -> bash ->
    java)."""
    root_cmdline = cmdline(root)

    def kind(pid: int) -> str:
        line = cmdline(pid)
        if line is None:
            return ""
        if pid == root:
            return "driver"
        if line == root_cmdline:
            return ""
        if proctree.command_name(pid) == "java":
            # Spark's JVM; not `java -version` or spark-class's launcher (a few seconds)
            return "other" if b"-version" in line or b"spark.launcher.Main" in line else "jvm"
        return "python workers" if b"pyspark" in line else "other"

    return kind


class HighWaterSampler(proctree.PeakSampler):
    """PeakSampler that also keeps each process's last VmHWM (exact, between samples too)."""

    def __init__(self, root: int, every: float, kind: Callable[[int], str]) -> None:
        super().__init__(root, every, kind)
        self.high: dict[tuple[int, str], int] = {}  # (pid, kind): exec starts a new VmHWM

    def sample(self) -> None:
        super().sample()
        for pid in proctree.tree_pids(self.root):
            label = self.kind(pid) if self.kind is not None else "all"
            value = proctree.high_water(pid)
            if value and label:
                self.high[pid, label] = max(value, self.high.get((pid, label), 0))


@dataclass
class Result:
    label: str
    wall: float
    code: int | None  # None: killed at the timeout
    peak: int
    peaks: dict[str, int]
    high: dict[tuple[int, str], int]  # (pid, kind) -> VmHWM
    summary: str
    refusal: str  # the bomb's log line about fetch.max_bytes, "" if none
    published: dict[tuple[str, str], int]


def run_once(label: str, folder: Path, args: argparse.Namespace) -> Result:
    """`roses once` in its own session, sampled until it exits (or is killed)."""
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    cmd = roses_command("once", "-c", str(folder / "feeds.yaml"))
    with open(folder / "stdout.txt", "w+") as out, open(folder / "stderr.txt", "w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=folder, stdout=out, stderr=err, env=env, start_new_session=True
        )
        sampler = HighWaterSampler(proc.pid, args.every, process_kinds(proc.pid))
        sampler.start()
        try:
            code: int | None = proc.wait(timeout=args.timeout)
            proctree.stop_tree(proc, grace=2.0)  # whatever it left behind in its session
        except subprocess.TimeoutExpired:
            code = None
            proctree.stop_tree(proc)
        finally:
            wall = time.perf_counter() - started
            sampler.stop()
            proctree.stop_tree(proc, grace=2.0)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    found = SUMMARY.search(stdout)
    refusals = [
        line.strip()
        for line in stderr.splitlines()
        if "source bomb:" in line and "fetch.max_bytes" in line
    ]
    return Result(
        label,
        wall,
        code,
        sampler.peak,
        dict(sampler.peaks),
        dict(sampler.high),
        found.group(0) if found else f"(no summary line; exit {code}; see {folder}/stderr.txt)",
        refusals[0] if refusals else "",
        published(folder / "data" / "store.sqlite"),
    )


def published(store: Path) -> dict[tuple[str, str], int]:
    """(stream, part) -> items in the output store (all of them, not only the last `keep`)."""
    if not store.exists():
        return {}
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT stream, part, COUNT(*) FROM entries GROUP BY stream, part")
        return {(stream, part): int(n) for stream, part, n in rows}
    finally:
        conn.close()


# -- the report ------------------------------------------------------------------------------


def mb(value: float) -> str:
    return fmt(value / MIB, ",.0f") + " MB"


def publication_line(result: Result, expected: Expected) -> str:
    filtered = result.published.get((FILTER_STREAM, ""), 0)
    split = {part: n for (stream, part), n in result.published.items() if stream == SPLIT_STREAM}
    same = split == dict(expected.split) and filtered == expected.filtered
    return (
        f"published from the big feed: {sum(split.values()):,} items in {len(split)} split "
        f"feeds (expected {expected.split.total():,} in {len(expected.split)}), "
        f"{filtered:,} in the filter (expected {expected.filtered:,}): "
        + ("as expected" if same else "DIFFERENT from the generated items")
    )


def exact(result: Result, kind: str) -> int | None:
    """The VmHWM of the one process of that kind; None unless there was exactly one."""
    values = [value for (_, label), value in result.high.items() if label == kind]
    return values[0] if len(values) == 1 else None


def describe(result: Result, expected: Expected, bomb: bool) -> list[str]:
    kinds = sorted(result.peaks, key=lambda k: KINDS.index(k) if k in KINDS else len(KINDS))
    lines = [
        f"## {result.label}",
        f"- wall {fmt(result.wall)} s, exit {'killed' if result.code is None else result.code}",
        f"- peak RSS of the process tree (sampled): {mb(result.peak)}",
        "- sampled peak per kind: " + "; ".join(f"{k} {mb(result.peaks[k])}" for k in kinds),
        "- high-water mark (VmHWM): "
        + ", ".join(f"{k} {mb(exact(result, k) or 0)}" for k in ("driver", "jvm")),
        f"- summary: {result.summary}",
        f"- {publication_line(result, expected)}",
    ]
    if bomb:
        verdict = f"yes: {result.refusal}" if result.refusal else "NO (no such log line)"
        lines.append(f"- bomb refused by the size cap: {verdict}")
    return lines


def difference(base: Result, hostile: Result) -> list[str]:
    def delta(a: int, b: int) -> str:
        return f"{mb(b)} - {mb(a)} = {'+' if b >= a else '-'}{mb(abs(b - a))}"

    lines = ["## the bomb's extra memory (hostile - baseline)"]
    lines.append(f"- tree, sampled peak: {delta(base.peak, hostile.peak)}")
    for kind in KINDS:
        line = f"- {kind}: sampled {delta(base.peaks.get(kind, 0), hostile.peaks.get(kind, 0))}"
        if kind in ("driver", "jvm"):
            line += f"; VmHWM {delta(exact(base, kind) or 0, exact(hostile, kind) or 0)}"
        lines.append(line)
    lines.append(f"- wall: {fmt(hostile.wall)} s vs {fmt(base.wall)} s")
    return lines


def result_row(result: Result, expected: Expected, bomb: bool) -> Row:
    """A run's figures (MB: 2^20 bytes) as a table row."""
    filtered = result.published.get((FILTER_STREAM, ""), 0)
    split = {part: n for (stream, part), n in result.published.items() if stream == SPLIT_STREAM}
    row: Row = {
        "run": result.label, "wall s": result.wall,
        "exit": "killed" if result.code is None else result.code,
        "peak RSS tree MB": round(result.peak / MIB),
        **{f"peak {kind} MB": round(result.peaks.get(kind, 0) / MIB) for kind in KINDS},
        **{f"VmHWM {k} MB": round((exact(result, k) or 0) / MIB) for k in ("driver", "jvm")},
        "published as expected": split == dict(expected.split) and filtered == expected.filtered,
        "bomb refused": bool(result.refusal) if bomb else None,
    }  # fmt: skip
    return row


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, quick="a 2,000-item feed and a 0.25 GiB bomb")
    add = parser.add_argument
    add("--items", type=int, help="items of the big feed (default 100,000; --quick 2,000)")
    add("--bomb-gb", type=float, help="GiB of zeros in the bomb (default 4; --quick 0.25)")
    add("--max-bytes", default="200MB", help="settings.fetch.max_bytes (default 200MB)")
    add("--fetch-timeout", default="120s", help="settings.fetch.timeout (default 120s)")
    add("--every", type=float, default=0.1, help="seconds between memory samples (0.1)")
    add("--timeout", type=float, default=1800.0, help="seconds per run before it is killed")
    add("--work", help="working folder (default: a new temporary one)")
    add("--keep", action="store_true", help="keep the working folder (feeds, data, logs)")
    add_master_and_seed(parser)
    parser.set_defaults(master="local[2]")
    args = parser.parse_args(argv)
    fill_defaults(args, {"items": (2_000, 100_000), "bomb_gb": (0.25, 4.0)})
    return args


def prepare(work: Path, args: argparse.Namespace) -> tuple[Expected, int]:
    started = time.perf_counter()
    expected = write_big_feed(work / "big.xml", args.items, args.seed)
    big_s = time.perf_counter() - started
    bomb_size = write_bomb(work / "bomb.xml", max(1, round(args.bomb_gb * 1024)))
    print(
        f"generated: big.xml {(work / 'big.xml').stat().st_size / MIB:,.1f} MB "
        f"({args.items:,} items, {big_s:.1f} s); bomb.xml {bomb_size:,} bytes "
        f"({args.bomb_gb:g} GiB of zeros, gzip, gzip; "
        f"{time.perf_counter() - started - big_s:.1f} s)",
        flush=True,
    )
    return expected, bomb_size


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    proctree.exit_on_sigterm()
    runs: list[list[Result]] = []
    with work_folder("roses-hostile-mem-", args.keep, args.work) as work:
        print(f"working in {work}", file=sys.stderr)
        expected, _ = prepare(work, args)
        routes = {
            "/big.xml": (work / "big.xml", {}),
            "/bomb.xml": (work / "bomb.xml", {"Content-Encoding": "gzip, gzip"}),
        }
        with FeedServer(routes) as server:
            for k in range(args.repeat):
                runs.append([])
                for label, bomb in (("baseline: big feed alone", False), ("hostile: + bomb", True)):
                    folder = work / f"{'hostile' if bomb else 'baseline'}-{k}"
                    folder.mkdir()
                    text = config_text(folder / "data", server.port, bomb, args)
                    (folder / "feeds.yaml").write_text(text)
                    print(f"running {label} ...", file=sys.stderr, flush=True)
                    runs[-1].append(run_once(label, folder, args))
            hits = dict(server.hits)
    results = runs[-1]
    report(
        args,
        f"roses once: peak memory, {args.bomb_gb:g} GiB gzip,gzip bomb + {args.items:,} items",
        [[result_row(r, expected, bomb) for r, bomb in zip(rs, (False, True), strict=True)]
         for rs in runs],
        notes=[
            f"Load average {os.getloadavg()[0]:.2f} at the end.  Caveat: cores shared with "
            "other jobs (a loaded machine): times vary widely, memory less so.  Spark master "
            f"{args.master}; fetch max_bytes {args.max_bytes}, timeout {args.fetch_timeout}; "
            f"sampled every {args.every:g} s; server GETs: {hits}",
            "In full (the last repeat):\n\n"
            + "\n\n".join("\n".join(describe(r, expected, bomb))
                          for r, bomb in zip(results, (False, True), strict=True))
            + "\n\n" + "\n".join(difference(results[0], results[1])),
            "MB: 2^20 bytes (as in fetch.max_bytes).  Sampled peak: the highest RSS sum"
            " over the tree (or a kind) at one sample; a spike shorter than the interval is"
            " missed.  VmHWM: the process's own peak RSS as the kernel counts it (exact; the"
            " driver and the JVM are one process each).  RSS counts pages a forked process"
            " shares with its parent (pyspark's workers, forked from its daemon) in both.",
        ],
    )  # fmt: skip
    every = [r for rs in runs for r in rs]
    ok = all(r.code == 0 for r in every) and all(bool(rs[1].refusal) for rs in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
