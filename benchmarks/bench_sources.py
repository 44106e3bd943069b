#!/usr/bin/env python3
"""Benchmark: how well `roses run` polls many sources, against a local feed farm.

For each N of --feeds (default 1000,10000,100000) and each refresh mode of --modes
(default fixed,adaptive), it starts benchmarks/feedfarm.py in this process (N synthetic RSS
feeds over N // 500 ports of 127.0.0.1, heavy-tailed publication rates, 30-400 ms
latency, 2% broken feeds: see that module) and `roses run -c CONFIG` against it, lets it
run --minutes M from its launch, stops it with SIGINT (SIGKILL after 120 s, reported),
and reports:

* start: launch to the first answer of /healthz (any status), and to its first 200;
  stop: SIGINT to exit.
* polls due and done.  Due, fixed mode: for each feed, the intervals elapsed from the
  daemon's first request to the end, plus one; adaptive mode: the budget over that time.
  Done: the requests the farm received until the SIGINT (200, 304, 500, unanswered).
  Poll gaps: p50/p99 of the time between two requests of a feed.  Poll lag: p50/p99 of
  the daemon's `roses_poll_lag_seconds` histogram (/metrics, read before the SIGINT),
  "n/a" when the daemon has none.  /healthz answer times (every 2 s) and /metrics
  scrape times (every 15 s) while it polls.
* completeness: of the items the working feeds published after the farm's start (its
  feeds' history, the 20 items each had before, is left out) and at least --settle
  seconds (default: the longest interval of the mode) before the end, the share found in the
  daemon's spool (DATA/spool/{log,archive}/**/*.jsonl, matched by guid).
* freshness: for the spooled items published after the daemon's first request, spool
  ts - real publication time, p50/p99.  Polls per item: polls done / items spooled.
* CPU, in cores on average from /healthz 200 (or the launch) to the SIGINT: utime+stime
  of the daemon's process tree from /proc, by kind (main process, Spark's JVM, Spark's
  Python workers, parse workers: multiprocessing children, other), and of the farm
  (its thread, and this whole process).  Memory: peak RSS of the tree (sampled every
  second; also as PSS, which counts the pages forked workers share once), of the main
  process alone, and each kind's processes' peak PSS together.

Modes: `fixed` gives every source `every: --every` (default 5m); `adaptive` gives none
and sets settings.fetch from ADAPTIVE_FETCH below (min_every, max_every, a budget of
polls per hour equal to the fixed mode's, N x 3600 / every).  A mode whose config
`roses check` refuses is skipped with its message.  Network: 127.0.0.1 only.  Figures
depend on the machine: run twice and quote the second run.

    .venv/bin/python benchmarks/bench_sources.py [--feeds 1000,10000,100000]
        [--modes fixed,adaptive] [--minutes 30] [--every 5m] [--max-every 15m]
        [--rate-mult 1] [--settle SECONDS] [--extra-fetch concurrency=200 ...]
        [--extra-spark busy_trigger=0s ...] [--no-history]
        [--master local[2]] [--work DIR] [--keep]

Backs: docs/benchmarks.md, section 'Polling many feeds' (every table and figure of
1,000 to 100,000 feeds, fixed and adaptive: polls due/done, lag, completeness,
freshness, CPU, memory; the footnoted command lines say which run).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import benchlib
import proctree
from bench_hostile_memory import cmdline
from bench_scale import roses_command
from bench_service import Daemon, free_port, http_get, percentile
from benchlib import Row, bench_parser, fill_defaults, fmt, work_folder
from feedfarm import FarmConfig, FeedFarm

from roses_app.config.durations import parse_duration

# -- the adaptive mode's settings.fetch keys (the names are being settled: adjust here) --
# {max_every} is --max-every; {budget} the fixed mode's polls per hour, N x 3600 / --every.
ADAPTIVE_FETCH = {"min_every": "1m", "max_every": "{max_every}", "budget": "{budget}"}

MODES = ("fixed", "adaptive")
KINDS = ("main", "jvm", "spark python", "parse workers", "other")
STOP_TIMEOUT = 120.0
MIB = 2**20
GUID = re.compile(r"<guid\b[^>]*>([^<]*)</guid>")
BUCKET = re.compile(r'^roses_poll_lag_seconds_bucket\{(?:[^}]*,)?le="([^"]+)"[^}]*\}\s+(\S+)')


# -- the daemon's config -----------------------------------------------------------------


def fetch_settings(mode: str, n: int, args: argparse.Namespace) -> dict[str, str]:
    """settings.fetch of the mode: the timeout, the adaptive keys, then --extra-fetch."""
    fetch = {"timeout": "30s"}
    if mode == "adaptive":
        budget = round(n * 3600 / parse_duration(args.every))
        values = {"max_every": args.max_every, "budget": budget}
        fetch.update({k: v.format(**values) for k, v in ADAPTIVE_FETCH.items()})
    for entry in args.extra_fetch:
        key, _, value = entry.partition("=")
        fetch[key.strip()] = value.strip()
    return fetch


def spark_extra(args: argparse.Namespace) -> str:
    """--extra-spark as more keys of settings.spark (``, busy_trigger: 0s``)."""
    pairs = (entry.partition("=") for entry in args.extra_spark)
    return "".join(f", {key.strip()}: {value.strip()}" for key, _, value in pairs)


def config_text(farm: FeedFarm, mode: str, port: int, args: argparse.Namespace) -> str:
    """The YAML, written as text: 100,000 sources make about 6 MB."""
    fetch = ", ".join(f"{k}: {v}" for k, v in fetch_settings(mode, len(farm.feeds), args).items())
    every = f", every: {args.every}" if mode == "fixed" else ""
    lines = [
        "settings:",
        "  data_dir: ./data",
        f"  http: {{host: 127.0.0.1, port: {port}}}",
        f'  spark: {{master: "{args.master}", shuffle_partitions: 2{spark_extra(args)}}}',
        f"  fetch: {{{fetch}}}",
        "sources:",
        *(f'  f{i}: {{feed: "{farm.url(i)}"{every}}}' for i in range(len(farm.feeds))),
        "streams:",
        "  probe:",
        "    filter: {from: f0, where: \"contains(title, 'zzzz-never')\"}",
        "    publish: true",
    ]
    return "\n".join(lines) + "\n"


def refusal(config: Path) -> str | None:
    """roses check's message when it refuses the config; None when it accepts it."""
    done = subprocess.run(
        roses_command("check", "-c", str(config)), capture_output=True, text=True, timeout=900
    )
    if done.returncode == 0:
        return None
    return (done.stdout + done.stderr).strip()[-3000:] or f"exit code {done.returncode}"


class PollDaemon(Daemon):
    """bench_service's daemon, stopped by SIGINT and, 120 s later, SIGKILL."""

    def stop(self, timeout: float = STOP_TIMEOUT) -> tuple[float, int | None]:
        """(seconds from SIGINT to exit, exit code; None when it had to be killed)."""
        if self.proc is None:
            return 0.0, None
        started = time.monotonic()
        code: int | None = None
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        took = time.monotonic() - started
        proctree.stop_tree(self.proc, grace=5.0)  # anything it left behind
        self.proc = None
        return took, code


# -- the daemon's processes: CPU by kind and memory --------------------------------------


def own_cpu(pid: int) -> float:
    """utime + stime of one process (not of its children); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / proctree.CLOCK_TICKS


def process_kind(pid: int, root: int, root_line: bytes | None) -> str:
    """main, jvm, spark python, parse workers or other; "" when the process is gone."""
    line = cmdline(pid)
    if line is None:
        return ""
    if pid == root:
        return "main"
    if proctree.command_name(pid) == "java":
        return "jvm"
    if b"pyspark" in line or b"roses_app.spark.pydaemon" in line:
        return "spark python"
    if b"resource_tracker" in line:
        return "other"
    if b"multiprocessing" in line or line == root_line:  # spawn/forkserver, or fork
        return "parse workers"
    return "other"


class TreeMonitor(threading.Thread):
    """Samples the daemon's tree every second: CPU time per (pid, kind), peak RSS."""

    def __init__(self, root: int, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.root, self.every, self.root_line = root, every, cmdline(root)
        self.first: dict[tuple[int, str], float] | None = None  # None: before mark()
        self.last: dict[tuple[int, str], float] = {}
        self.peak_tree = self.peak_main = self.main_hwm = 0
        # kind -> its processes' peak PSS together: a child the JVM has forked and not
        # yet exec'd shows the JVM's RSS (and command line) for a moment, its PSS not
        self.peak_kinds: dict[str, int] = {}
        self.peak_pss = 0  # of the tree: shared pages counted once
        self.marked_at = self.stopped_at = time.monotonic()
        self._lock, self._done = threading.Lock(), threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.sample()

    def sample(self) -> None:
        total = pss = 0
        kinds: dict[str, int] = dict.fromkeys(KINDS, 0)
        with self._lock:
            for pid in proctree.tree_pids(self.root):
                kind = process_kind(pid, self.root, self.root_line)
                if not kind:
                    continue
                cpu, rss = own_cpu(pid), proctree.rss_bytes(pid)
                if cpu:
                    self.last[pid, kind] = cpu
                    if self.first is not None:
                        self.first.setdefault((pid, kind), 0.0)  # started since the mark
                share = proctree.pss_bytes(pid)
                total += rss
                pss += share
                kinds[kind] += share
                if kind == "main":
                    self.peak_main = max(self.peak_main, rss)
                    self.main_hwm = max(self.main_hwm, proctree.high_water(pid))
        self.peak_tree = max(self.peak_tree, total)
        self.peak_pss = max(self.peak_pss, pss)
        for kind, rss in kinds.items():
            self.peak_kinds[kind] = max(self.peak_kinds.get(kind, 0), rss)

    def mark(self) -> None:
        """Start the CPU window now."""
        self.sample()
        with self._lock:
            self.first, self.marked_at = dict(self.last), time.monotonic()

    def stop(self) -> None:
        self.sample()
        self.stopped_at = time.monotonic()
        self._done.set()
        self.join()

    def cores(self) -> dict[str, float]:
        """Cores used on average per kind between mark() and stop()."""
        wall = max(1e-9, self.stopped_at - self.marked_at)
        used: dict[str, float] = dict.fromkeys(KINDS, 0.0)
        for key, cpu in self.last.items():
            start = (self.first or {}).get(key, 0.0)
            used[key[1]] = used.get(key[1], 0.0) + (cpu - start) / wall
        return used


# -- one run -----------------------------------------------------------------------------


@dataclass
class Run:
    n: int
    mode: str
    note: list[str] = field(default_factory=list)
    start_any: float | None = None
    start_ok: float | None = None
    stop_s: float | None = None
    exit_code: int | None = None
    killed: bool = False
    first_poll: float | None = None  # time.time() of the daemon's first request
    first_round_end: float | None = None  # when every working feed had its first request
    end: float = 0.0  # time.time() of the SIGINT
    metrics: str = ""
    cores: dict[str, float] = field(default_factory=dict)
    farm_cores: float = 0.0
    bench_cores: float = 0.0
    peak_tree: int = 0
    peak_main: int = 0
    peak_kinds: dict[str, int] = field(default_factory=dict)
    peak_pss: int = 0
    figures: dict[str, float | None] = field(default_factory=dict)
    per_minute: list[int] = field(default_factory=list)  # requests per minute from the first
    healthz_ms: list[float] = field(default_factory=list)  # /healthz answer times while polling
    metrics_ms: list[float] = field(default_factory=list)  # /metrics scrapes, every 15 s
    losers: list[str] = field(default_factory=list)  # the feeds that lost most warm items


def wait_for_start(daemon: Daemon, run: Run, deadline: float) -> None:
    """Poll /healthz every 0.25 s until it answers 200 (or the run's end)."""
    while time.monotonic() < deadline:
        daemon.check_alive()
        status = http_get(daemon.url("/healthz"), timeout=5.0)[0]
        since = time.monotonic() - daemon.started
        if status and run.start_any is None:
            run.start_any = since
        if status == 200:
            run.start_ok = since
            return
        time.sleep(0.25)
    run.note.append("/healthz never answered 200")


def wait_for_end(daemon: Daemon, farm: FeedFarm, run: Run, deadline: float) -> None:
    """Sleep until the deadline, checking the daemon (and timing its /healthz: the
    main process must stay responsive while it polls) and printing progress each minute."""
    next_report = time.monotonic() + 60.0
    next_scrape = time.monotonic()
    while (now := time.monotonic()) < deadline:
        daemon.check_alive()
        asked = time.perf_counter()
        if http_get(daemon.url("/healthz"), timeout=30.0)[0]:
            run.healthz_ms.append((time.perf_counter() - asked) * 1000.0)
        if now >= next_scrape:  # as Prometheus would (its default interval: 15 s)
            asked = time.perf_counter()
            if http_get(daemon.url("/metrics"), timeout=30.0)[0]:
                run.metrics_ms.append((time.perf_counter() - asked) * 1000.0)
            next_scrape += 15.0
        if now >= next_report:
            requests = sum(len(f.requests) for f in farm.feeds)
            left = (deadline - now) / 60
            print(f"  {requests:,} requests so far, {left:.1f} min left", file=sys.stderr)
            next_report += 60.0
        time.sleep(min(2.0, max(0.0, deadline - now)))


def measure(farm: FeedFarm, daemon: PollDaemon, run: Run, args: argparse.Namespace) -> None:
    """Launch, run for --minutes, read /metrics, SIGINT; CPU and memory meanwhile (CPU
    from /healthz 200, or from the launch if it never came)."""
    daemon.start()
    deadline = daemon.started + args.minutes * 60.0
    monitor = TreeMonitor(daemon.pid)
    monitor.start()
    farm_cpu, bench_cpu = farm.cpu_seconds(), process_cpu()
    try:
        wait_for_start(daemon, run, deadline)
        if run.start_ok is not None:
            monitor.mark()
            farm_cpu, bench_cpu = farm.cpu_seconds(), process_cpu()
        wait_for_end(daemon, farm, run, deadline)
        run.metrics = http_get(daemon.url("/metrics"), timeout=120.0)[1].decode(errors="replace")
    except RuntimeError as exc:  # the daemon exited by itself
        run.note.append(str(exc).splitlines()[0])
        print(f"  {exc}", file=sys.stderr)
    finally:
        run.end = time.time()
        monitor.stop()
        wall = max(1e-9, monitor.stopped_at - monitor.marked_at)
        run.farm_cores = (farm.cpu_seconds() - farm_cpu) / wall
        run.bench_cores = (process_cpu() - bench_cpu) / wall
        run.stop_s, run.exit_code = daemon.stop()
        run.killed = run.exit_code is None
    run.cores, run.peak_tree = monitor.cores(), monitor.peak_tree
    run.peak_main = max(monitor.peak_main, monitor.main_hwm)
    run.peak_kinds = dict(monitor.peak_kinds)
    run.peak_pss = monitor.peak_pss


def process_cpu() -> float:
    times = os.times()
    return times.user + times.system


def run_one(n: int, mode: str, work: Path, args: argparse.Namespace) -> Run:
    """One N x mode: the farm, the config, its check, the measured run, the figures."""
    run = Run(n, mode)
    folder = work / f"n{n}-{mode}"
    folder.mkdir(parents=True, exist_ok=True)
    shape = FarmConfig(n, args.hosts, args.rate_mult, args.seed, args.host_skew)
    farm = FeedFarm(replace(shape, history=args.history))
    farm.start()
    print(f"== N = {n:,}, {mode}: {farm.describe()}", file=sys.stderr)
    try:
        port = free_port()
        config = folder / "feeds.yaml"
        config.write_text(config_text(farm, mode, port, args), "utf-8")
        refused = refusal(config)
        if refused is not None:
            print(f"## N = {n:,}, {mode}: skipped, roses check refused its config:\n{refused}\n")
            message = refused.splitlines()[0].split(": ", 1)[-1]
            run.note.append("roses check refused the config: " + message)
            return run
        measure(farm, PollDaemon(config, port), run, args)
    finally:
        farm.stop()
    run.figures = figures(farm, run, folder / "data", args)
    print("\n".join(details(run)) + "\n", flush=True)
    return run


# -- the figures -------------------------------------------------------------------------


def spooled(data: Path) -> dict[str, int]:
    """guid -> its first spool ts (µs since the epoch), over the spool's log and archive."""
    first: dict[str, int] = {}
    root = data / "spool"
    for path in [*(root / "log").rglob("*.jsonl"), *(root / "archive").rglob("*.jsonl")]:
        with open(path, "rb") as fh:
            for line in fh:
                event = json.loads(line)
                found = GUID.search(event.get("item") or "")
                if found:
                    guid, ts = found.group(1).strip(), int(event["ts"])
                    first[guid] = min(ts, first.get(guid, ts))
    return first


def histogram_quantile(text: str, q: float) -> float | None:
    """The q-quantile of roses_poll_lag_seconds (buckets summed over its labels,
    interpolated in the bucket as Prometheus does); None without that metric."""
    buckets: dict[float, float] = defaultdict(float)
    for line in text.splitlines():
        found = BUCKET.match(line)
        if found:
            buckets[float(found.group(1))] += float(found.group(2))
    if not buckets or buckets.get(math.inf, 0.0) <= 0:
        return None
    bounds = sorted(buckets)
    rank, below, lower = q * buckets[math.inf], 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / max(1e-12, count - below)
        below, lower = count, bound
    return lower


def poll_counts(farm: FeedFarm, run: Run) -> dict[str, float | None]:
    """Polls done until the end, and the gaps between a feed's polls."""
    gaps: list[float] = []
    done = never = 0
    minutes = [0] * (math.ceil((run.end - (run.first_poll or run.end)) / 60) or 1)
    for feed in farm.feeds:
        times = [t for t in feed.requests if t <= run.end]
        done += len(times)
        never += not times
        gaps.extend(b - a for a, b in itertools.pairwise(times))
        for t in times:
            minutes[min(len(minutes) - 1, int((t - (run.first_poll or t)) / 60))] += 1
    run.per_minute = minutes
    ok = sum(f.ok for f in farm.feeds)
    unchanged = sum(f.not_modified for f in farm.feeds)
    return {
        "done": done,
        "never": never,
        "ok": ok,
        "not_modified": unchanged,
        "failed": sum(f.failed for f in farm.feeds),
        "gap_p50": percentile(gaps, 50) if gaps else None,
        "gap_p99": percentile(gaps, 99) if gaps else None,
    }


def polls_due(farm: FeedFarm, run: Run, args: argparse.Namespace) -> float | None:
    """Fixed: per feed, the intervals elapsed since its first poll, plus one, where a
    first poll may come up to one interval after the daemon's first request (a poll not
    made by then is due from then); adaptive: the budget over the time since the first
    request."""
    if run.first_poll is None:
        return None
    every = parse_duration(args.every)
    if run.mode == "adaptive":
        return len(farm.feeds) * max(0.0, run.end - run.first_poll) / every
    latest = run.first_poll + every
    due = 0
    for feed in farm.feeds:
        first = min(feed.requests[0], latest) if feed.requests else latest
        if first <= run.end:
            due += math.floor((run.end - first) / every) + 1
    return due


def item_figures(farm: FeedFarm, run: Run, data: Path, settle: float) -> dict[str, float | None]:
    """Completeness, freshness, and the items spooled."""
    spool = spooled(data) if data.exists() else {}
    working = {f.index for f in farm.feeds if not f.broken}
    items = [(g, t) for i, g, t in farm.published(run.end) if i in working]
    counted = [(g, t) for g, t in items if t <= run.end - settle]
    eligible = [g for g, _ in counted]
    captured = sum(1 for g in eligible if g in spool)
    start = run.first_poll or run.end
    fresh = [spool[g] / 1e6 - t for g, t in items if g in spool and t >= start]
    # warm: once every working feed has had its first poll (a cold start's first round
    # of N new documents takes minutes at 100,000; a restart resumes from stored state)
    round_end = run.first_round_end or run.end
    warm = [g for g, t in items if round_end <= t <= run.end - settle]
    warm_fresh = [spool[g] / 1e6 - t for g, t in items if g in spool and t >= round_end]
    run.losers = losers(farm, [g for g in warm if g not in spool], run.end)
    return {
        "lost": len(eligible) - captured,
        "lost_unpolled": sum(1 for _ in lost_before_first_poll(farm, counted, spool)),
        "round_s": round_end - start,
        "warm_eligible": len(warm),
        "warm_complete": 100.0 * sum(1 for g in warm if g in spool) / len(warm) if warm else None,
        "warm_fresh_p50": percentile(warm_fresh, 50) if warm_fresh else None,
        "warm_fresh_p99": percentile(warm_fresh, 99) if warm_fresh else None,
        "published": len(items),
        "eligible": len(eligible),
        "captured": captured,
        "complete": 100.0 * captured / len(eligible) if eligible else None,
        "spooled": sum(1 for g, _ in items if g in spool),
        "fresh_n": len(fresh),
        "fresh_p50": percentile(fresh, 50) if fresh else None,
        "fresh_p99": percentile(fresh, 99) if fresh else None,
    }


def feed_of(guid: str) -> int:
    """The index of the farm feed that published ``guid`` (``f{index}-...``)."""
    return int(guid[1:].partition("-")[0])


def lost_before_first_poll(
    farm: FeedFarm, items: Sequence[tuple[str, float]], spool: Mapping[str, int]
) -> Iterator[str]:
    """The items not captured that their feed published before its first request: out
    of reach of a poller that had not polled the feed yet, if pushed out by then."""
    for guid, published in items:
        if guid in spool:
            continue
        requests = farm.feeds[feed_of(guid)].requests
        if not requests or published < requests[0]:
            yield guid


def losers(farm: FeedFarm, lost: Sequence[str], end: float, top: int = 5) -> list[str]:
    """The feeds that lost most of the warm items: each with its rate, its polls and
    their longest gap (why an item was lost: a document filled up between two polls)."""
    by_feed: dict[int, int] = defaultdict(int)
    for guid in lost:
        by_feed[feed_of(guid)] += 1
    out = []
    for index, count in sorted(by_feed.items(), key=lambda kv: -kv[1])[:top]:
        feed = farm.feeds[index]
        times = [t for t in feed.requests if t <= end]
        gap = max((b - a for a, b in itertools.pairwise(times)), default=math.inf)
        out.append(
            f"f{index} lost {count} ({farm.rates_per_hour[index]:.0f} items/h, "
            f"{len(times)} polls, longest gap {gap:.0f} s)"
        )
    return out


def figures(
    farm: FeedFarm, run: Run, data: Path, args: argparse.Namespace
) -> dict[str, float | None]:
    firsts = [f.requests[0] for f in farm.feeds if f.requests]
    run.first_poll = min(firsts) if firsts else None
    working = [f for f in farm.feeds if not f.broken]
    polled = [f.requests[0] for f in working if f.requests]
    run.first_round_end = max(polled) if polled and len(polled) == len(working) else None
    settle = args.settle if args.settle is not None else mode_interval(run.mode, args)
    found: dict[str, float | None] = {"settle": settle, "due": polls_due(farm, run, args)}
    found.update(poll_counts(farm, run))
    found.update(item_figures(farm, run, data, settle))
    spooled_items, done = found["spooled"], found["done"]
    found["polls_per_item"] = done / spooled_items if spooled_items and done else None
    found["lag_p50"] = histogram_quantile(run.metrics, 0.5)
    found["lag_p99"] = histogram_quantile(run.metrics, 0.99)
    return found


def mode_interval(mode: str, args: argparse.Namespace) -> float:
    return parse_duration(args.every if mode == "fixed" else args.max_every)


# -- the report --------------------------------------------------------------------------


def mb(value: int) -> str:
    return f"{value / MIB:,.0f}"


def pair(a: float | None, b: float | None, spec: str = ".1f") -> str:
    if a is None and b is None:
        return "n/a"
    return f"{fmt(a, spec)} / {fmt(b, spec)}"


def details(run: Run) -> list[str]:
    """The run's figures in full, printed as soon as it ends."""
    f = run.figures
    killed = " (killed with SIGKILL)" if run.killed else ""
    cores = ", ".join(f"{k} {v:.2f}" for k, v in run.cores.items())
    return [
        f"## N = {run.n:,}, {run.mode}" + (f"  ({'; '.join(run.note)})" if run.note else ""),
        f"- start: /healthz answers {fmt(run.start_any, '.1f')} s, 200 after "
        f"{fmt(run.start_ok, '.1f')} s; stop: {fmt(run.stop_s, '.1f')} s{killed}",
        f"- polls due {fmt(f.get('due'), ',.0f')}, done {fmt(f.get('done'), ',.0f')} "
        f"({fmt(f.get('ok'), ',.0f')} x 200, {fmt(f.get('not_modified'), ',.0f')} x 304, "
        f"{fmt(f.get('failed'), ',.0f')} x 500); gaps p50/p99 "
        f"{pair(f.get('gap_p50'), f.get('gap_p99'))} s; lag p50/p99 "
        f"{pair(f.get('lag_p50'), f.get('lag_p99'), '.2f')} s; feeds never polled "
        f"{fmt(f.get('never'), ',.0f')}",
        f"- requests per minute from the first: {', '.join(map(str, run.per_minute)) or '-'}",
        f"- items: {fmt(f.get('published'), ',.0f')} published by working feeds, "
        f"{fmt(f.get('spooled'), ',.0f')} spooled; completeness "
        f"{fmt(f.get('captured'), ',.0f')} / {fmt(f.get('eligible'), ',.0f')} = "
        f"{fmt(f.get('complete'), '.1f')}% (published > {fmt(f.get('settle'), '.0f')} s "
        f"before the end; of the {fmt(f.get('lost'), ',.0f')} lost, "
        f"{fmt(f.get('lost_unpolled'), ',.0f')} published before their feed's first poll); "
        f"freshness p50/p99 {pair(f.get('fresh_p50'), f.get('fresh_p99'))} s "
        f"over {fmt(f.get('fresh_n'), ',.0f')}; polls per item {fmt(f.get('polls_per_item'))}",
        f"- warm, after the first round ({fmt(f.get('round_s'), '.0f')} s from the first "
        f"poll): completeness {fmt(f.get('warm_complete'), '.2f')}% of "
        f"{fmt(f.get('warm_eligible'), ',.0f')}; freshness p50/p99 "
        f"{pair(f.get('warm_fresh_p50'), f.get('warm_fresh_p99'))} s; most lost: "
        f"{'; '.join(run.losers) or 'none'}",
        f"- /healthz while polling: p50 {fmt(_pct(run.healthz_ms, 50), '.0f')} ms, "
        f"p99 {fmt(_pct(run.healthz_ms, 99), '.0f')} ms, max "
        f"{fmt(max(run.healthz_ms, default=None), '.0f')} ms over {len(run.healthz_ms)}; "
        f"/metrics scrape p50 {fmt(_pct(run.metrics_ms, 50), '.0f')} ms, p99 "
        f"{fmt(_pct(run.metrics_ms, 99), '.0f')} ms over {len(run.metrics_ms)}",
        f"- CPU cores: {cores}; farm thread {run.farm_cores:.2f}, bench process "
        f"{run.bench_cores:.2f}; peak RSS: tree {mb(run.peak_tree)} MB (PSS, shared pages "
        f"once: {mb(run.peak_pss)} MB), main {mb(run.peak_main)} MB; each kind's peak PSS: "
        + ", ".join(f"{kind} {mb(rss)} MB" for kind, rss in run.peak_kinds.items()),
    ]


def _pct(values: Sequence[float], p: float) -> float | None:
    return percentile(values, p) if values else None


def table_row(run: Run) -> Row:
    f = run.figures
    row: Row = {
        "N": run.n, "mode": run.mode, "start s (any)": run.start_any,
        "start s (200)": run.start_ok, "stop s": run.stop_s, "killed": run.killed,
        "polls due": _int(f.get("due")), "done": _int(f.get("done")),
        "gap p50 s": f.get("gap_p50"), "gap p99 s": f.get("gap_p99"),
        "lag p50 s": f.get("lag_p50"), "lag p99 s": f.get("lag_p99"),
        "complete %": f.get("complete"), "fresh p50 s": f.get("fresh_p50"),
        "fresh p99 s": f.get("fresh_p99"), "polls/item": f.get("polls_per_item"),
    }  # fmt: skip
    row |= {f"cores {kind}": run.cores.get(kind) if run.cores else None for kind in KINDS}
    row |= {
        "farm cores": run.farm_cores if run.figures else None,
        "peak RSS tree MB": round(run.peak_tree / MIB) if run.peak_tree else None,
        "peak RSS main MB": round(run.peak_main / MIB) if run.peak_tree else None,
        "note": "; ".join(run.note)[:120],
    }
    return row


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def report(runs: Sequence[Sequence[Run]], args: argparse.Namespace) -> None:
    """Each repeat's runs: a row per N and mode, medians over the repeats."""
    adaptive = ", ".join(f"{k}: {v}" for k, v in fetch_settings("adaptive", 1, args).items())
    benchlib.report(
        args,
        "`roses run` polling a local feed farm",
        [[table_row(run) for run in repeat] for repeat in runs if repeat],
        notes=[
            "Command: " + shlex.join([sys.executable, *sys.argv]),
            f"{args.minutes:g} min per run from the launch; fixed: every {args.every}; "
            f"adaptive: settings.fetch {{{adaptive}}} (the budget for N = 1, times N); "
            f"publication rates x{args.rate_mult:g}.",
            LEGEND,
        ],
    )


# -- command line ------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = bench_parser(__doc__, quick="200 feeds, fixed mode, every 20s, 1 minute per run")
    add = parser.add_argument
    add("--feeds", help="numbers of feeds, comma-separated (1000,10000,100000; --quick 200)")
    add("--modes", help="refresh modes: fixed, adaptive or both (both; --quick fixed)")
    add("--minutes", type=float, help="minutes per run, from the launch (30; --quick 1)")
    add("--every", help="the fixed mode's interval (5m; --quick 20s)")
    add("--max-every", default="15m", help="the adaptive mode's max_every (15m)")
    add("--settle", type=float, help="seconds: items published later are not counted")
    add("--rate-mult", type=float, default=1.0, help="publication rates x this (10: 10x mode)")
    add("--hosts", type=int, help="ports of the farm (default N // 500)")
    add("--host-skew", type=float, default=0.0, help="feeds per port ∝ 1/rank^S (0: even)")
    add("--extra-fetch", action="append", default=[], metavar="KEY=VALUE")
    add("--extra-spark", action="append", default=[], metavar="KEY=VALUE")
    add("--master", default="local[2]", help="Spark master (default local[2])")
    add("--seed", type=int, default=42)
    add("--no-history", dest="history", action="store_false", help="farm feeds start empty")
    add("--work", help="working folder (default: a new temporary one)")
    add("--keep", action="store_true", help="keep the working folder (configs, data, logs)")
    args = parser.parse_args(argv)
    fill_defaults(args, {"feeds": ("200", "1000,10000,100000"), "minutes": (1.0, 30.0),
                         "modes": ("fixed", "fixed,adaptive"), "every": ("20s", "5m")})  # fmt: skip
    args.feed_counts = [int(v) for v in args.feeds.split(",") if v.strip()]
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(args.mode_list) - set(MODES):
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}: use fixed, adaptive")
    for option, entries in (("fetch", args.extra_fetch), ("spark", args.extra_spark)):
        if bad := [e for e in entries if "=" not in e]:
            parser.error(f"--extra-{option} wants KEY=VALUE, not {bad[0]!r}")
    return args


def runs_of(args: argparse.Namespace, work: Path) -> Iterator[Run]:
    for n in args.feed_counts:
        for mode in args.mode_list:
            yield run_one(n, mode, work, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    proctree.exit_on_sigterm()
    runs: list[list[Run]] = []
    with work_folder("roses-sources-", args.keep, args.work) as work:
        print(f"working in {work}", file=sys.stderr)
        try:
            for k in range(args.repeat):
                folder = work / f"run-{k}" if args.repeat > 1 else work
                folder.mkdir(exist_ok=True)
                runs.append([])
                for run in runs_of(args, folder):
                    runs[-1].append(run)
        finally:
            if runs:  # what was measured before a failure or a SIGTERM, too
                report(runs, args)
    return 0


LEGEND: str = """\
start: launch -> first /healthz answer / first 200.  due: fixed, per feed the intervals
since the feed's first request (at the latest one interval after the daemon's first) + 1;
adaptive, the budget over the time since the daemon's first request.  done:
requests the farm received (broken feeds' included).  gap: between two requests of one
feed.  lag: roses_poll_lag_seconds (n/a: the daemon has no such metric).  complete: items
of working feeds published > settle s before the SIGINT that reached the spool.  fresh:
spool ts - publication, items published after the first request.  cores: averages from
/healthz 200 to the SIGINT; main/jvm/spark py/parse/other: the daemon's processes."""

if __name__ == "__main__":
    sys.exit(main())
