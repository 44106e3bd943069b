"""Writing many files on a few threads.

A 10,000-subscription replay writes 10,016 files and a static export 40,000: much of
that time was the file system creating files one by one (0.1-0.5 ms each on the
test machine), with the CPU idle.  Creating, reading and writing a file release the
GIL, so a few threads overlap them.  The writes are handed over in batches and the
caller waits for each batch: a thread finishing a system call while the caller
renders the next document waited for the GIL (a switch interval, 5 ms, each time),
which made an export overlapping its writes with its rendering slower than one
writing alone.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")

WRITERS = 4  # threads: creating files went about twice as fast with 4 as with 1
BATCH = 256  # writes handed over at a time: what the caller holds before they are done


class ParallelWrites(Generic[T]):
    """A context manager: :meth:`submit` queues a write, every ``batch`` of them are
    run on ``threads`` threads, and leaving the block runs the rest.  The first error
    of a batch is raised: no later batch runs, and the block is left once every
    write of that batch has ended.
    :meth:`results` gives what each write returned, in the order of submission."""

    def __init__(self, threads: int = WRITERS, batch: int = BATCH) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="roses-write")
        self._batch = batch
        self._queued: list[tuple[Callable[..., T], tuple[Any, ...]]] = []
        self._results: list[T] = []

    def submit(self, write: Callable[..., T], *args: Any) -> None:
        self._queued.append((write, args))
        if len(self._queued) >= self._batch:
            self._run()

    def _run(self) -> None:
        futures = [self._pool.submit(write, *args) for write, args in self._queued]
        self._queued.clear()
        self._results.extend(future.result() for future in futures)

    def results(self) -> list[T]:
        return self._results

    def __enter__(self) -> ParallelWrites[T]:
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
