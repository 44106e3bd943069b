#!/usr/bin/env python3
"""Benchmark: ROSES's WebSub hub with 10,000 subscribers of one feed, through `roses run`.

1. starts `roses run` on a config with one file: source (polled every second) and one
   published stream ``news`` over it, with ``settings.websub.allow_private_callbacks:
   true`` (the subscribers are on 127.0.0.1) and ``max_subscriptions_per_callback_host``
   above --subscribers (they are all one host); the hub's other settings are ROSES's
   defaults unless --per-host / --verify-queue say otherwise;
2. one asyncio HTTP server on 127.0.0.1 serves --subscribers distinct callback URLs
   (tests/websub_fleet.py): each echoes the hub's challenge and records what it gets;
   all subscribe to the Atom feed of ``news`` over 8 kept-alive connections (a 503
   from the hub's bounded verification queue is retried after its Retry-After);
3. --changes times, one after the other: an item ``change-K`` is written into the
   source's file, and the benchmark waits until every subscriber has a delivered
   document with it (at most --change-timeout seconds);
4. SIGTERM: how long the daemon takes to exit, and its exit code.

Printed: the time to verify all (first request to the hub's /healthz counting them
all), deliveries per change (each must be --subscribers), delivery time from the
change (the file written) to each subscriber's delivery, p50/p99/max (the poll, the
micro-batch and the fan-out to all), the peak memory of the daemon's process (VmHWM)
and of its whole tree (sampled: the JVM and Spark's Python workers too), the stop.

    .venv/bin/python benchmarks/bench_hub.py [--subscribers 10000] [--changes 5]

Network: 127.0.0.1 only.  Figures depend on the machine: run twice, quote the second.

Backs: docs/benchmarks.md, section 'Item-to-feed latency' (the paragraph on 10,000
WebSub subscribers of one feed: verified in, change -> delivery p50/p99, peak memory,
SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))  # the subscriber fleet, shared with its test

import proctree  # noqa: E402
from bench_service import Daemon, free_port, http_get, percentile, wait_for_all  # noqa: E402
from benchlib import Row, bench_parser, fill_defaults, report, work_folder  # noqa: E402
from websub_fleet import Fleet  # noqa: E402

CONFIG = """\
settings:
  data_dir: ./data
  http: {{host: 127.0.0.1, port: {port}}}
  spark: {{master: "{master}", shuffle_partitions: 2}}
  websub: {{{websub}}}
sources:
  live: {{feed: "file:live.xml", every: 1s}}
streams:
  news:
    filter: {{from: live, where: "true()"}}
    publish: {{title: "News", keep: {{count: 50}}}}
"""


def websub_settings(subscribers: int, per_host: int | None, verify_queue: int | None) -> str:
    """``settings.websub`` of the run: callbacks on 127.0.0.1, all of them one host."""
    entries = [
        "allow_private_callbacks: true",
        f"max_subscriptions_per_callback_host: {max(subscribers, 1000)}",
    ]
    if per_host is not None:
        entries.append(f"per_host: {per_host}")
    if verify_queue is not None:
        entries.append(f"verify_queue: {verify_queue}")
    return ", ".join(entries)


def write_feed(path: Path, changes: int) -> None:
    """The source's file: a first item, then ``change-0`` .. ``change-{changes-1}``."""
    titles = ["start", *(f"change-{k}" for k in range(changes))]
    items = "".join(
        f"<item><title>{t}</title><link>http://127.0.0.1/{t}</link><guid>{t}</guid></item>"
        for t in reversed(titles)
    )
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        '<?xml version="1.0"?><rss version="2.0"><channel><title>Live</title>'
        f"<link>http://127.0.0.1/</link><description>d</description>{items}</channel></rss>"
    )
    tmp.replace(path)  # whole, as a poll must see it


@dataclass
class Figures:
    subscribers: int
    verify_seconds: float = 0.0
    statuses: dict[int, int] = field(default_factory=dict)
    per_change: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    change_seconds: list[float] = field(default_factory=list)  # to the last delivery
    deliveries: int = 0
    daemon_peak: int = 0
    tree_peak: int = 0
    stop_seconds: float = 0.0
    exit_code: int | None = None


def subscriptions(daemon: Daemon) -> int:
    status, body = http_get(daemon.url("/healthz"))
    if status not in (200, 503) or not body:
        return 0
    return int(json.loads(body).get("websub", {}).get("subscriptions", 0))


def subscribe(daemon: Daemon, fleet: Fleet, figures: Figures, timeout: float) -> None:
    started = time.monotonic()
    statuses = fleet.subscribe_all(daemon.url("/websub/hub"), daemon.url("/feeds/news.atom"))
    figures.statuses = dict(statuses)
    deadline = started + timeout
    while subscriptions(daemon) < fleet.n:
        daemon.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{subscriptions(daemon)} of {fleet.n} verified in {timeout:g} s")
        time.sleep(0.1)
    figures.verify_seconds = time.monotonic() - started


def changes(folder: Path, fleet: Fleet, figures: Figures, n: int, timeout: float) -> None:
    for k in range(n):
        write_feed(folder / "live.xml", k + 1)
        written = time.time()
        deadline = time.monotonic() + timeout
        while fleet.got(k) < fleet.n and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # late ones, if any, and what a duplicate would bring
        seen = dict(fleet.record.seen.get(k, {}))
        figures.per_change.append(len(seen))
        figures.latencies += [at - written for at in seen.values()]
        figures.change_seconds.append(max(seen.values(), default=written) - written)
    figures.deliveries = sum(fleet.record.deliveries.values())


def stop(daemon: Daemon, figures: Figures) -> None:
    """SIGTERM, as systemd stops it: the seconds to exit and the exit code."""
    proc = daemon.proc
    assert proc is not None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        figures.exit_code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        figures.exit_code = None  # reported as killed
    figures.stop_seconds = time.monotonic() - started
    proctree.stop_tree(proc, grace=5.0)  # anything it left behind
    daemon.proc = None


def run(folder: Path, args: argparse.Namespace) -> Figures:
    port = free_port()
    websub = websub_settings(args.subscribers, args.per_host, args.verify_queue)
    config = folder / "feeds.yaml"
    config.write_text(CONFIG.format(port=port, master=args.master, websub=websub), "utf-8")
    write_feed(folder / "live.xml", 0)
    figures = Figures(args.subscribers)
    daemon = Daemon(config, port)
    fleet = Fleet(args.subscribers).start()
    try:
        daemon.start()
        feed = daemon.url("/feeds/news.rss")
        started = {"the feed": lambda: b">start<" in http_get(feed)[1]}
        wait_for_all(started, daemon, args.start_timeout)
        with proctree.PeakSampler(daemon.pid, every=0.5) as sampler:
            subscribe(daemon, fleet, figures, args.verify_timeout)
            changes(folder, fleet, figures, args.changes, args.change_timeout)
            figures.daemon_peak = proctree.high_water(daemon.pid)
        figures.tree_peak = sampler.peak
        stop(daemon, figures)
    finally:
        if daemon.proc is not None:
            daemon.stop()
        fleet.close()
    if fleet.record.bad:
        print(f"requests the fleet could not place: {dict(fleet.record.bad)}")
    return figures


def figure_row(f: Figures) -> Row:
    """One run's figures as a row (seconds, MB)."""
    lat = f.latencies
    return {
        "subscribers": f.subscribers,
        "verify all s": f.verify_seconds,
        "deliveries per change": ", ".join(f"{n:,}" for n in f.per_change),
        "every subscriber got every change": set(f.per_change) == {f.subscribers},
        "change -> delivery p50 s": percentile(lat, 50) if lat else None,
        "p99 s": percentile(lat, 99) if lat else None,
        "max s": max(lat) if lat else None,
        "change -> last delivery s": ", ".join(f"{s:.1f}" for s in f.change_seconds),
        "deliveries": f.deliveries,
        "daemon peak MB (VmHWM)": round(f.daemon_peak / 2**20),
        "tree peak MB (sampled)": round(f.tree_peak / 2**20),
        "SIGTERM to exit s": f.stop_seconds,
        "exit code": "killed" if f.exit_code is None else f.exit_code,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = bench_parser(__doc__)
    add = parser.add_argument
    add("--subscribers", type=int, help="subscribers (default 10,000; --quick 50)")
    add("--changes", type=int, help="changes (default 5; --quick 2)")
    add("--per-host", type=int, help="settings.websub.per_host (default ROSES's)")
    add("--verify-queue", type=int, help="settings.websub.verify_queue")
    add("--master", default="local[2]")
    add("--start-timeout", type=float, default=240.0)
    add("--verify-timeout", type=float, default=600.0)
    add("--change-timeout", type=float, default=300.0)
    add("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    fill_defaults(args, {"subscribers": (50, 10_000), "changes": (2, 5)})
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    found: list[Figures] = []
    with work_folder("roses-bench-hub-", args.keep) as work:
        for k in range(args.repeat):
            folder = work / f"run-{k}"
            folder.mkdir()
            found.append(run(folder, args))
        if args.keep:
            print(f"work folder: {work}", file=sys.stderr)
    websub = websub_settings(args.subscribers, args.per_host, args.verify_queue)
    report(
        args,
        f"WebSub hub: {args.subscribers:,} subscribers of one feed through `roses run`",
        [[figure_row(f)] for f in found],
        notes=[
            f"settings.websub: {{{websub}}}; Spark master {args.master}; subscription requests "
            f"answered (the last run): {found[-1].statuses} (503: the verification queue was "
            "full; retried after Retry-After).",
            "The subscribers (an asyncio server, one thread) run on the same machine and "
            "share its cores with the daemon (its JVM and Python workers too).",
        ],
    )
    complete = all(f.per_change == [args.subscribers] * args.changes for f in found)
    return 0 if complete and all(f.exit_code == 0 for f in found) else 1


if __name__ == "__main__":
    sys.exit(main())
