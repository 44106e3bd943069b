"""The committer's pace: while polls keep finding items, their spool appends (each a
Spark micro-batch) are at least ``pace`` apart; the first after a quiet spell, pushed
items, state-only commits and a stop's are written at once."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from roses_app.connectors.committer import Committer
from roses_app.connectors.poller import Items
from roses_app.connectors.state import SourceState, StateStore

PACE = 0.6


class TimedSink:
    """The spool's place: when each append came, and whose items it held."""

    def __init__(self) -> None:
        self.appends: list[tuple[float, list[str]]] = []

    def __call__(self, polls: Sequence[tuple[str, Items]]) -> None:
        self.appends.append((time.monotonic(), [name for name, _ in polls]))

    @property
    def names(self) -> list[str]:
        return [name for _, names in self.appends for name in names]


def items(name: str) -> Items:
    return [(f"<item><guid>{name}</guid></item>", None)]


def state(name: str) -> SourceState:
    url = f"http://127.0.0.1:9/{name}"
    return SourceState(name=name, configured_url=url, url=url)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    states = StateStore(tmp_path / "state.sqlite")
    yield states
    states.close()


async def steady_flow(committer: Committer, polls: int, every: float) -> None:
    """A poll with items every ``every`` seconds, each awaiting its commit."""
    waiting = []
    for n in range(polls):
        name = f"s{n}"
        waiting.append(asyncio.create_task(committer.commit(name, items(name), state(name))))
        await asyncio.sleep(every)
    await asyncio.gather(*waiting)


def test_under_a_steady_flow_appends_are_a_pace_apart_and_lose_nothing(store: StateStore):
    sink = TimedSink()

    async def run() -> None:
        committer = Committer(sink, store, pace=PACE)
        committer.start()
        await steady_flow(committer, 30, 0.05)  # 1.5 s of polls, 20 a second
        await committer.close()

    asyncio.run(run())
    assert sorted(sink.names) == sorted(f"s{n}" for n in range(30))
    times = [at for at, _ in sink.appends]
    assert len(times) <= 4  # unpaced: one append every max_wait, about 25
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= PACE * 0.95 for gap in gaps), gaps
    assert set(sink.names) == {s.name for s in store.all()}  # and every state


def test_without_a_pace_every_max_wait_appends(store: StateStore):
    sink = TimedSink()

    async def run() -> None:
        committer = Committer(sink, store)
        committer.start()
        await steady_flow(committer, 30, 0.05)
        await committer.close()

    asyncio.run(run())
    assert len(sink.appends) >= 10


def test_the_first_items_after_a_quiet_spell_go_at_once(store: StateStore):
    sink = TimedSink()

    async def run() -> list[float]:
        committer = Committer(sink, store, pace=30.0)
        committer.start()
        took = []
        for name in ("first", "after-a-pace"):
            asked = time.monotonic()
            await committer.commit(name, items(name), state(name))
            took.append(time.monotonic() - asked)
            committer._appended -= 30.0  # as if a pace had gone by
        await committer.close()
        return took

    took = asyncio.run(run())
    assert all(t < 1.0 for t in took), took
    assert sink.names == ["first", "after-a-pace"]


def test_state_only_commits_and_pushed_items_do_not_wait_for_the_pace(store: StateStore):
    sink = TimedSink()

    async def run() -> dict[str, float]:
        committer = Committer(sink, store, pace=30.0)
        committer.start()
        await committer.commit("opening", items("opening"), state("opening"))
        held = asyncio.create_task(committer.commit("held", items("held"), state("held")))
        took = {}
        others: list[tuple[str, Items, SourceState | None]] = [
            ("unchanged", [], state("unchanged")),
            ("pushed", items("pushed"), None),
        ]
        for name, its, st in others:
            asked = time.monotonic()
            await committer.commit(name, its, st)
            took[name] = time.monotonic() - asked
        await held  # the push's append took the held poll along
        await committer.close()
        return took

    took = asyncio.run(run())
    assert took["unchanged"] < 1.0 and took["pushed"] < 1.0, took
    assert store.get("unchanged") is not None and store.get("held") is not None
    assert sink.names == ["opening", "held", "pushed"]


def test_a_stop_writes_the_held_items_at_once(store: StateStore):
    sink = TimedSink()

    async def run() -> float:
        committer = Committer(sink, store, pace=30.0)
        committer.start()
        await committer.commit("opening", items("opening"), state("opening"))
        held = asyncio.create_task(committer.commit("held", items("held"), state("held")))
        await asyncio.sleep(0.2)
        assert not held.done()  # waiting for the pace
        asked = time.monotonic()
        await committer.close()
        await held
        return time.monotonic() - asked

    assert asyncio.run(run()) < 1.0
    assert sink.names == ["opening", "held"]
    assert store.get("held") is not None
