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
    ) -> None:
        self.sink_many = sink_many
        self.states = states
        self.max_wait = max_wait
        self.max_polls = max_polls
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

    async def _serve(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._closing and len(self._queue) < self.max_polls:
                await asyncio.sleep(self.max_wait)  # let the polls ending now join in
            if self._queue:
                await self._flush()
            if self._queue:
                self._wake.set()  # what came during the write waits its turn, and more
            elif self._closing:
                return

    async def _flush(self) -> None:
        batch, self._queue = self._queue[: self.max_polls], self._queue[self.max_polls :]
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
