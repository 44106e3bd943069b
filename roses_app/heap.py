"""Keeping Python's cycle collector off the long-lived objects.

A config of thousands of subscriptions compiles to millions of small objects (plans,
postings, compiled expressions) that live as long as the process.  Every full
collection walks all of them, and the per-batch rows trigger collections often:
at 10,000 subscriptions that was about half of the fused stage's time.  Freezing
moves what exists now into a generation the collector never scans; objects freed
by reference counting are still freed.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

_lock = threading.Lock()


def freeze_long_lived() -> None:
    """Collect once (so no garbage is frozen), then freeze every object alive."""
    with _lock:
        gc.collect()
        gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cycle collection during one batch.  A batch allocates several objects per
    item (trees, rows, dicts) and almost no cycles; with the collector on, it walked
    them every 700 allocations, a third of the fused stage's time even with the
    long-lived heap frozen.  Cycles the batch made are collected once it is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@contextmanager
def building_long_lived() -> Iterator[None]:
    """No cycle collection while a structure that lives as long as the process is
    built (a config: its values, plans, parsed expressions), and what is alive then
    frozen, so that no collection walks it again.  A config of 100,000 subscriptions
    is millions of objects: the first collection after it took a fifth of its check
    (every object made meanwhile is in the youngest generation: any collection walks
    them all).  Objects freed by reference counting are still freed; the cyclic
    garbage the block leaves is not collected: keep it small (reading a config of
    filters leaves none, the checks of stateful streams a few hundred objects)."""
    was_on = gc.isenabled()
    with collector_paused():
        try:
            yield
        finally:
            if was_on:  # frozen before the collector is back on
                with _lock:
                    gc.freeze()


def no_collection_at_exit() -> None:
    """Spare the interpreter's last full collection, which walks every object still
    alive: 5 s after a 10,000-subscription replay had printed its result.  Only for
    a process about to end: what is frozen is never collected (objects freed by
    reference counting still are; files and the JVM are closed before this)."""
    with _lock:
        gc.freeze()


FULL_EVERY_SECONDS = 600.0
# a generation-1 collection every 7,000 allocations: this many of them is hours
NO_AUTOMATIC_FULL = 1_000_000


class PacedFullCollections:
    """A long-running process's full collections at its own pace, not the collector's.

    The collector runs a full collection (every object tracked, the whole heap) when
    the objects that survived the young generations since the last one reach a
    quarter of the old ones.  A daemon polling 100,000 feeds keeps each poll's items
    a few seconds (parse results, paced spool appends), long enough to survive: a
    full collection came every 4 to 5 s, and each held the interpreter 200-340 ms
    over its heap (py-spy: 37% of the time the GIL was held), stalling every answer
    of the HTTP server (/healthz p99 420 ms).  While :meth:`start` is in force the
    collector makes no full collection of its own; :meth:`tick` (the daemon's loop,
    each second) makes one every ``every`` seconds, so the cycles among the old
    objects are still collected, and the young generations are as before."""

    def __init__(
        self, every: float = FULL_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.clock = clock
        self.full = 0  # full collections made
        self.seconds = 0.0  # their time together
        self._before: tuple[int, int, int] | None = None
        self._last = clock()

    def start(self) -> None:
        if self._before is None:
            self._before = gc.get_threshold()
            gc.set_threshold(self._before[0], self._before[1], NO_AUTOMATIC_FULL)
            self._last = self.clock()

    def tick(self) -> None:
        if self._before is None or self.clock() - self._last < self.every:
            return
        started = time.perf_counter()
        found = gc.collect()
        took = time.perf_counter() - started
        self.full, self.seconds, self._last = self.full + 1, self.seconds + took, self.clock()
        log.debug("full collection: %d unreachable objects, %.0f ms", found, took * 1000)

    def stop(self) -> None:
        if self._before is not None:
            gc.set_threshold(*self._before)
            self._before = None


__all__ = [
    "FULL_EVERY_SECONDS",
    "PacedFullCollections",
    "building_long_lived",
    "collector_paused",
    "freeze_long_lived",
    "no_collection_at_exit",
]
