"""An asyncio event loop in a thread of its own, for the synchronous parts of ROSES.

The feed connector's fetches and polls are coroutines (many servers are waited on at
once, see :mod:`roses_app.connectors.engine`).  The daemon, the CLI and the tests call
them from ordinary threads: :meth:`LoopThread.run` hands a coroutine to the loop and
waits for its result, from any thread and from several threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running in a daemon thread until :meth:`close`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (or its exception)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel what still runs, stop the loop and wait for its thread."""
        if self.loop.is_closed():
            return
        if self._thread.is_alive():
            with contextlib.suppress(TimeoutError, RuntimeError):
                self.run(_cancel_others(), timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_others() -> None:
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
