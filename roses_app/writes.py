"""Writing many files on a few threads.

A 10,000-subscription replay writes 10,016 files (450 MB): on the test machine that
took 3 to 10 s, most of it waiting for the file system to create them one by one.
Creating and writing a file release the GIL, so a few threads overlap them.  The
writes are handed over in batches and the caller waits for each batch instead of
making the next files' bytes meanwhile: a thread back from a system call while the
caller ran Python code waited for the GIL.  (The static export, whose time is
mostly rendering and whose files mostly hold their bytes already, went slower on
threads, batched or not: it writes alone.)
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

WRITERS = 4  # threads: creating files went about twice as fast with 4 as with 1
BATCH = 256  # writes handed over at a time: what the caller holds before they are done


class ParallelWrites:
    """A context manager: :meth:`submit` queues a write, every ``batch`` of them are
    run on ``threads`` threads, and leaving the block runs the rest.  The first error
    of a batch is raised: no later batch runs, and the block is left once every
    write of that batch has ended."""

    def __init__(self, threads: int = WRITERS, batch: int = BATCH) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="roses-write")
        self._batch = batch
        self._queued: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def submit(self, write: Callable[..., object], *args: Any) -> None:
        self._queued.append((write, args))
        if len(self._queued) >= self._batch:
            self._run()

    def _run(self) -> None:
        futures = [self._pool.submit(write, *args) for write, args in self._queued]
        self._queued.clear()
        for future in futures:
            future.result()  # the first error, once the batch has been handed over

    def __enter__(self) -> ParallelWrites:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            if error is None:
                self._run()
        finally:
            self._pool.shutdown(wait=True)


__all__ = ["ParallelWrites"]
