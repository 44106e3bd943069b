"""Committing many polls at once: one spool append and one state transaction.

Every poll ends with a write: its new items to the spool, then its state (validators,
backoff, counters) to the state store, each durable (fsync).  At a hundred polls a
second that is two hundred fsyncs a second.  :class:`Committer` gathers the polls that
end within ``max_wait`` (or ``max_polls`` of them) and writes them together, in a
thread so the fetch loop goes on: the items of all of them as one spool append (one
file, one fsync), then all their states in one transaction.  The order is the
connector's guarantee: a state is recorded only once its items are safe, so a crash
between the two refetches items the spool then drops as seen, and loses none.  When
the append fails, each poll that had items is told so (it fails and is retried); the
state-only commits of the batch go on.

With ``pace`` (the daemon's ``settings.spark.busy_trigger``), the polls that found new
items are appended at most once every ``pace`` seconds: each append is a spool file
and so a Spark micro-batch, which costs the JVM about 0.3 core-seconds whatever its
size (benchmarks/bench_trigger.py), so while new items keep coming (a first round of
thousands of feeds) fewer, larger appends save most of that.  The first append after
a quiet spell, items pushed in by a hub, and the polls' state-only commits (304s,
errors) are written at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from roses_app.connectors.poller import Items
from roses_app.connectors.state import SourceState, StateStore

log = logging.getLogger(__name__)

SinkMany = Callable[[Sequence[tuple[str, Items]]], None]


@dataclass
class _Pending:
    name: str
    items: Items
    state: SourceState | None  # None: items pushed in, no poll's state
    done: asyncio.Future[None]


class Committer:
    """Batches the commits of polls (see the module docstring); runs on one loop."""

    def __init__(
        self,
        sink_many: SinkMany,
        states: StateStore,
        *,
        max_wait: float = 0.05,
        max_polls: int = 500,
        pace: float = 0.0,
    ) -> None:
        self.sink_many = sink_many
        self.states = states
        self.max_wait = max_wait
        self.max_polls = max_polls
        self.pace = pace
        self._appended = -pace  # (loop time) the last append of polls' items
        self._timer: asyncio.TimerHandle | None = None
        self.batches = 0  # batches written (for tests and metrics)
        self._queue: list[_Pending] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._serve(), name="committer")

    async def commit(self, name: str, items: Items, state: SourceState | None) -> None:
        """Queue a poll's items and state; return once both are written (or raise)."""
        if self._wake is None:
            raise RuntimeError("Committer.start() was not called")
        done = asyncio.get_running_loop().create_future()
        done.add_done_callback(_retrieved)
        self._queue.append(_Pending(name, items, state, done))
        self._wake.set()
        # shielded: a poll cancelled now (a stop) is still written as queued, or not at all
        await asyncio.shield(done)

    async def close(self) -> None:
        """Write what is queued (a write in progress ends first), then stop."""
        task, self._task = self._task, None
        if task is None or self._wake is None:
            return
        self._closing = True
        self._wake.set()
        await task

    def _hold(self) -> float:
        """Seconds the polls' items still wait (0: they are written now)."""
        if self._closing or self.pace <= 0:
            return 0.0
        with_items = [p for p in self._queue if p.items]
        if len(with_items) >= self.max_polls or any(p.state is None for p in with_items):
            return 0.0  # a full batch, or items pushed in by a hub: now
        return max(0.0, self._appended + self.pace - asyncio.get_running_loop().time())

    async def _serve(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._closing and len(self._queue) < self.max_polls:
                await asyncio.sleep(self.max_wait)  # let the polls ending now join in
            now = self._hold() <= 0
            if now or not all(p.items for p in self._queue):
                await self._flush(items=now)
            wait = self._hold()
            if self._queue and wait > 0 and all(p.items for p in self._queue):
                self._wake_in(wait)  # the items wait for the pace
            elif self._queue:
                self._wake.set()  # what came during the write waits its turn, and more
            elif self._closing:
                return

    def _wake_in(self, seconds: float) -> None:
        assert self._wake is not None
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._wake.set)

    async def _flush(self, items: bool = True) -> None:
        """Write up to ``max_polls`` queued polls (``items``: those with items too)."""
        chosen = [p for p in self._queue if items or not p.items][: self.max_polls]
        taken = {id(p) for p in chosen}
        self._queue = [p for p in self._queue if id(p) not in taken]
        batch = chosen
        if not batch:
            return
        if any(p.items for p in batch):
            self._appended = asyncio.get_running_loop().time()
        outcome = await asyncio.to_thread(self._write, batch)
        self.batches += 1
        for pending, error in zip(batch, outcome, strict=True):
            if pending.done.done():
                continue
            if error is None:
                pending.done.set_result(None)
            else:
                pending.done.set_exception(error)

    def _write(self, batch: list[_Pending]) -> list[BaseException | None]:
        """Items first, then the states of the polls whose items are safe."""
        errors: list[BaseException | None] = [None] * len(batch)
        with_items = [n for n, p in enumerate(batch) if p.items]
        if with_items:
            try:
                self.sink_many([(batch[n].name, batch[n].items) for n in with_items])
            except Exception as exc:
                log.error("spool: cannot append the items of %d poll(s): %s", len(with_items), exc)
                for n in with_items:
                    errors[n] = exc
        states = [p.state for p, e in zip(batch, errors, strict=True) if e is None and p.state]
        try:
            self.states.put_many(states)
        except Exception as exc:
            log.error("cannot record the state of %d source(s): %s", len(states), exc)
            errors = [e if e is not None else exc for e in errors]
        return errors


def _retrieved(done: asyncio.Future[None]) -> None:
    """A poll cancelled while its commit was queued no longer awaits the outcome: its
    failure is logged by the writer already, not again as "never retrieved"."""
    if not done.cancelled():
        done.exception()
