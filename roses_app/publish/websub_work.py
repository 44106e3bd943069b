"""The WebSub hub's work on its asyncio loop: handed over from any thread, tracked
until it is over (:meth:`HubWork.drain`), its failures logged and counted, never the
hub's.  Also counts the subscription requests waiting for their verification, in all
and per callback host (the hub answers 503 past its bounds)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("roses_app.publish.websub")


class HubWork:
    """The loop's work of :class:`~roses_app.publish.websub.Hub` (its base)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.counters: dict[str, int] = {"errors": 0}
        # Counted under _idle: work not over (drain), and subscription requests whose
        # verification is not over, in all and per callback host (the 503 bounds).
        self._idle = threading.Condition()
        self._pending = 0
        self._waiting = 0
        self._waiting_at: dict[str, int] = {}

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until no verification, delivery or ping is pending; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def submit(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` on the hub's loop (from any thread), counted until it is over."""
        with self._idle:
            self._pending += 1
        if not self._hand_over(self._tracked(work)):
            work.close()
            self._done()

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Like :meth:`submit`, from the hub's loop."""
        with self._idle:
            self._pending += 1
        self._start(self._tracked(work))

    def _hand_over(self, work: Coroutine[Any, Any, None]) -> bool:
        loop = self._loop
        try:
            if loop is not None:
                loop.call_soon_threadsafe(self._start, work)
                return True
        except RuntimeError:  # the loop closed meanwhile
            log.debug("WebSub: the hub stopped; work not handed over")
        work.close()  # nothing will run it
        return False

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # the loop keeps only a weak reference to its tasks
        task.add_done_callback(self._tasks.discard)

    async def _tracked(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except Exception:  # one task's failure (logged, counted), never the hub's
            self.counters["errors"] += 1
            log.exception("WebSub task failed")
        finally:
            self._done()

    def _done(self, host: str | None = None) -> None:
        with self._idle:
            self._pending -= 1
            if host is not None:
                self._waiting -= 1
                left = self._waiting_at.pop(host) - 1
                if left:
                    self._waiting_at[host] = left
            self._idle.notify_all()
