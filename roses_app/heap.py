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
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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


__all__ = [
    "building_long_lived",
    "collector_paused",
    "freeze_long_lived",
    "no_collection_at_exit",
]
