#!/usr/bin/env python3
"""Benchmark: how the feed connector hands due polls out, at N sources.

Side by side, in one process, for N = 1,000, 10,000 and 100,000 sources:

- **a job per source**: APScheduler's ``AsyncIOScheduler`` with one interval job per
  source (what ROSES did with threads before), every job due within the same minute;
- **one job** (what ROSES does): one APScheduler job and a
  :class:`~roses_app.connectors.pollqueue.PollQueue` of N sources.

For each: the time to set the N sources up, the memory they take (tracemalloc), and
the scheduler's own CPU time per poll handed out while a minute's worth of polls (N / 15,
as at a 15-minute interval) are handed out as fast as they come due (the polls do
nothing).  No network.

Then, for 100,000 sources all due at once on --hosts hosts (a backlog: the first round
of new feeds), the PollQueue's CPU time per poll handed out under ROSES's bounds (200
polls in flight, 2 per host, starts on a host 0.5 s apart, on a simulated clock, its
next wakeup asked after each take): real feeds live on many hosts, and the queue must
not read every host to find the next poll.  ``--before FILE`` also runs an older
``pollqueue.py`` (e.g. ``git show REV:roses_app/connectors/pollqueue.py > FILE``) on
the same work, side by side.

    .venv/bin/python benchmarks/bench_dispatch.py [--sizes 1000,10000,100000]
        [--hosts 500,5000,50000] [--before FILE]

Backs: docs/benchmarks.md, section 'Polling many feeds' (the paragraph on
bench_dispatch.py: set-up, memory and µs a poll at 100,000 sources; µs a poll with a
backlog at 500, 5,000 and 50,000 hosts, against an older pollqueue.py).
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import random
import sys
import time
import tracemalloc
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from benchlib import Row, bench_parser, fill_defaults, repeated, report

from roses_app.connectors.pollqueue import PollQueue

INTERVAL = 900.0  # seconds: every source polled every 15 minutes


async def jobs_per_source(n: int) -> tuple[float, float, float]:
    """(set-up s, MB, µs per run) with one APScheduler job per source."""
    done = 0
    target = max(1, n // 15)
    finished = asyncio.Event()

    async def poll() -> None:
        nonlocal done
        done += 1
        if done == target:
            finished.set()

    scheduler = AsyncIOScheduler(timezone=UTC)
    tracemalloc.start()
    started = time.perf_counter()
    now = datetime.now(UTC)
    for k in range(n):
        # a minute's polls due now (spread over a few ms each), the others in 15 minutes
        first = now + timedelta(seconds=1 + k * 1e-3 if k < target else INTERVAL)
        scheduler.add_job(
            poll,
            "interval",
            seconds=INTERVAL,
            next_run_time=first,
            id=f"s{k}",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
    setup = time.perf_counter() - started
    scheduler.start()  # the pending jobs go into the job store now
    megabytes = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    cpu = time.process_time()  # CPU, not wall: the runs are spread over a second or two
    await asyncio.wait_for(finished.wait(), 600)
    per_run = (time.process_time() - cpu) / target
    scheduler.shutdown(wait=False)
    return setup, megabytes, per_run * 1e6


async def one_job(n: int) -> tuple[float, float, float]:
    """(set-up s, MB, µs per poll handed out) with one job and a PollQueue."""
    target = max(1, n // 15)
    tracemalloc.start()
    started = time.perf_counter()
    queue = PollQueue(concurrency=100, per_host=4, spacing=0.0)
    now = time.time()
    for k in range(n):
        at = now + (0.0 if k < target else INTERVAL)  # a minute's polls: due now
        queue.schedule(f"s{k}", f"host{k % 500}:80", at)
    setup = time.perf_counter() - started
    megabytes = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    cpu = time.process_time()
    handed = 0
    while handed < target:
        for name, _ in queue.take(time.time()):
            handed += 1
            queue.done(name)
            queue.schedule(name, "host", time.time() + INTERVAL)
    per_poll = (time.process_time() - cpu) / target
    return setup, megabytes, per_poll * 1e6


def backlog(queue_type: type[PollQueue], hosts: int, polls: int = 20_000) -> float:
    """µs of CPU per poll handed out, 100,000 sources due at once on ``hosts`` hosts."""
    rng = random.Random(1)
    queue = queue_type(concurrency=200, per_host=2, spacing=0.5)
    for k in range(100_000):
        queue.schedule(f"s{k}", f"h{k % hosts}", at=rng.random() * 10, slack=INTERVAL)
    now, done = 20.0, 0
    in_flight = [name for name, _ in queue.take(now)]  # every source due: not timed
    for name in in_flight:
        queue.release(name)
    cpu = time.process_time()
    while done < polls:
        for name, _ in queue.take(now):
            queue.release(name)  # fetched; its poll goes on until done()
            in_flight.append(name)
        queue.next_wakeup()
        half = len(in_flight) // 2 + 1  # half of the polls in flight end each 10 ms
        for name in in_flight[:half]:
            queue.done(name)
        done, in_flight = done + min(half, len(in_flight)), in_flight[half:]
        now += 0.01
    return (time.process_time() - cpu) / done * 1e6


def _older(path: str) -> type[PollQueue]:
    spec = importlib.util.spec_from_file_location("older_pollqueue", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module.PollQueue  # type: ignore[no-any-return]


def dispatch_rows(sizes: Sequence[int]) -> list[Row]:
    rows: list[Row] = []
    for n in sizes:
        for label, way in (("a job per source", jobs_per_source), ("one job + PollQueue", one_job)):
            gc.collect()
            setup, megabytes, per_poll = asyncio.run(way(n))
            rows.append({"sources": n, "way": label, "set-up s": setup,
                         "memory MB": round(megabytes), "µs a poll": round(per_poll)})  # fmt: skip
    return rows


def backlog_rows(hosts_counts: Sequence[int], before: type[PollQueue] | None) -> list[Row]:
    rows: list[Row] = []
    for hosts in hosts_counts:
        now = backlog(PollQueue, hosts)
        row: Row = {"hosts": hosts, "PollQueue µs a poll": round(now)}
        if before is not None:
            then = backlog(before, hosts, 2_000 if hosts > 10_000 else 20_000)
            row |= {"before µs a poll": round(then), "ratio": then / now}
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--sizes", help="sources (default 1000,10000,100000; --quick 1000)")
    parser.add_argument(
        "--hosts", help="hosts of the backlog (default 500,5000,50000; --quick 500)"
    )
    parser.add_argument("--before", help="an older pollqueue.py, run side by side")
    args = parser.parse_args(argv)
    fill_defaults(
        args, {"sizes": ("1000", "1000,10000,100000"), "hosts": ("500", "500,5000,50000")}
    )
    sizes = [int(x) for x in args.sizes.split(",")]
    hosts = [int(x) for x in args.hosts.split(",")]
    before = _older(args.before) if args.before else None
    dispatch = repeated(args, lambda: dispatch_rows(sizes))
    queue = repeated(args, lambda: backlog_rows(hosts, before))
    backlog_title = "A backlog: 100,000 sources due at once, the PollQueue's CPU a poll"
    report(args, "Handing due polls out: a job per source vs one job and a PollQueue",
           dispatch, sections=[(backlog_title, queue)])  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
