#!/usr/bin/env python3
"""Benchmark: the fetcher's CPU per fetch, one pool per host vs one pool for all hosts.

A local feed farm (benchmarks/feedfarm.py, in a process of its own so that its CPU is not
counted: --feeds feeds over --hosts ports of 127.0.0.1, 30-400 ms a request) is fetched
by ROSES's AsyncFetcher as the daemon does it: at most --concurrency fetches in flight,
at most --per-host on one host.  Each pass fetches every working feed once (conditional
requests after the first pass: mostly 304s, as in steady polling); the two transports
alternate, --repeat passes each:

* host pools: the fetcher's transport (roses_app/connectors/hostpool.py);
* one pool: a single httpx transport for every host (the earlier transport).

Printed: fetches/s and CPU microseconds per fetch of this process (the fetch loop only),
p50 over the passes, and the ratio.  Network: 127.0.0.1 only.  Figures depend on the
machine: run it twice and quote the second run.

    .venv/bin/python benchmarks/bench_fetch.py [--feeds 20000] [--hosts 200] [--repeat 2]

Backs: docs/operating.md, the fetcher's connection pools (a pool per host cost more CPU
a fetch for hundreds of hosts); its own --repeat is the passes of each transport.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import feedfarm
from benchlib import bench_parser, fill_defaults, report

from roses_app.config.model import FetchSettings
from roses_app.connectors.fetch import AsyncFetcher, single_pool_transport

HERE = Path(__file__).resolve().parent


def start_farm(args: argparse.Namespace) -> subprocess.Popen[str]:
    farm = subprocess.Popen(
        [sys.executable, str(HERE / "feedfarm.py"), "--feeds", str(args.feeds),
         "--hosts", str(args.hosts), "--port-base", str(args.port_base),
         "--duration", "7200"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert farm.stdout is not None
    for line in farm.stdout:
        if line.startswith("ports "):
            return farm
    raise RuntimeError("the feed farm did not start (is --port-base free?)")


def urls(args: argparse.Namespace) -> list[str]:
    broken = feedfarm.broken_feeds(args.feeds, feedfarm.BROKEN_FRACTION, 42)
    return [
        f"http://127.0.0.1:{args.port_base + i % args.hosts}/f/{i}.xml"
        for i in range(args.feeds)
        if i not in broken
    ]


async def one_pass(
    fetcher: AsyncFetcher, targets: list[str], validators: dict[str, tuple[str | None, ...]],
    args: argparse.Namespace,
) -> tuple[float, float]:  # fmt: skip
    """Fetch every target once: (wall seconds, CPU seconds of this process)."""
    everyone = asyncio.Semaphore(args.concurrency)
    hosts: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(args.per_host))

    async def fetch(url: str) -> None:
        async with everyone, hosts[url.split("/")[2]]:
            etag, modified = validators.get(url, (None, None))
            result = await fetcher.fetch(url, etag, modified)
            validators[url] = (result.etag, result.last_modified)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(fetch(url) for url in targets))
    return time.perf_counter() - wall, time.process_time() - cpu


async def measure(args: argparse.Namespace, targets: list[str]) -> dict[str, list[float]]:
    settings = FetchSettings(
        timeout_seconds=30.0, concurrency=args.concurrency, per_host=args.per_host
    )
    fetchers = {
        "host pools": AsyncFetcher(settings),
        "one pool": AsyncFetcher(settings, transport=single_pool_transport(settings)),
    }
    validators: dict[str, dict[str, tuple[str | None, ...]]] = {k: {} for k in fetchers}
    cpu_per_fetch: dict[str, list[float]] = {k: [] for k in fetchers}
    rates: dict[str, list[float]] = {k: [] for k in fetchers}
    for label, fetcher in fetchers.items():  # a first pass each: connections, validators
        await one_pass(fetcher, targets, validators[label], args)
    for k in range(args.repeat):
        for label in list(fetchers)[:: 1 if k % 2 == 0 else -1]:
            wall, cpu = await one_pass(fetchers[label], targets, validators[label], args)
            cpu_per_fetch[label].append(1e6 * cpu / len(targets))
            rates[label].append(len(targets) / wall)
            print(f"  {label}: {len(targets) / wall:,.0f} fetches/s, "
                  f"{1e6 * cpu / len(targets):,.0f} µs CPU a fetch", file=sys.stderr)  # fmt: skip
    for fetcher in fetchers.values():
        await fetcher.aclose()
    return {**{f"{k} cpu": v for k, v in cpu_per_fetch.items()},
            **{f"{k} rate": v for k, v in rates.items()}}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__, repeat=None)
    parser.add_argument("--feeds", type=int, help="feeds (default 20,000; --quick 200)")
    parser.add_argument("--hosts", type=int, help="local ports (default 200; --quick 4)")
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--per-host", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="passes of each transport")
    parser.add_argument("--port-base", type=int, default=19100)
    args = parser.parse_args(argv)
    fill_defaults(args, {"feeds": (200, 20_000), "hosts": (4, 200)})
    farm = start_farm(args)
    try:
        targets = urls(args)
        found = asyncio.run(measure(args, targets))
    finally:
        farm.terminate()
        farm.wait(30)
    # each pass a run: the report gives the median of the passes and their spread
    runs = [
        [{"transport": label, "fetches/s": round(found[f"{label} rate"][k]),
          "CPU µs a fetch": round(found[f"{label} cpu"][k])}
         for label in ("host pools", "one pool")]
        for k in range(args.repeat)
    ]  # fmt: skip
    ratio = statistics.median(found["one pool cpu"]) / statistics.median(found["host pools cpu"])
    report(
        args,
        "The fetcher's CPU per fetch: one pool per host vs one pool",
        runs,
        notes=[
            f"{len(targets):,} working feeds on {args.hosts} local ports, concurrency "
            f"{args.concurrency}, per host {args.per_host}; p50 of {args.repeat} passes "
            f"(mostly 304s).  CPU a fetch: one pool / host pools = {ratio:.2f}x"
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
