"""The daemon's full collections come at its loop's pace (roses_app/heap.py): while
it runs, the collector makes none of its own (each took 200-340 ms at 100,000 feeds,
every 4-5 s), and the loop makes one every FULL_EVERY_SECONDS, so that cycles among
old objects are still freed."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from roses_app.heap import NO_AUTOMATIC_FULL, PacedFullCollections


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_no_full_collection_but_the_loops_and_the_thresholds_back_after(
    thresholds: tuple[int, int, int],
) -> None:
    now = [0.0]
    paced = PacedFullCollections(every=600.0, clock=lambda: now[0])
    paced.start()
    assert gc.get_threshold() == (thresholds[0], thresholds[1], NO_AUTOMATIC_FULL)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the cycle collector frees it
    gc.collect(0)
    gc.collect(1)  # survived the young generations: now among the old objects
    gone = weakref.ref(a)
    del a, b
    for _ in range(50):  # plenty of young collections: none of them is full
        gc.collect(1)
    assert gone() is not None
    now[0] = 599.0
    paced.tick()
    assert paced.full == 0 and gone() is not None
    now[0] = 600.0
    paced.tick()  # the loop's own full collection frees the old cycle
    assert paced.full == 1 and gone() is None and paced.seconds >= 0.0
    paced.tick()
    assert paced.full == 1  # not again until `every` has passed
    paced.stop()
    assert gc.get_threshold() == thresholds


def test_before_start_and_after_stop_it_does_nothing(thresholds: tuple[int, int, int]) -> None:
    now = [0.0]
    paced = PacedFullCollections(every=1.0, clock=lambda: now[0])
    now[0] = 10.0
    paced.tick()
    assert paced.full == 0 and gc.get_threshold() == thresholds
    paced.start()
    paced.stop()
    now[0] = 20.0
    paced.tick()
    assert paced.full == 0 and gc.get_threshold() == thresholds
