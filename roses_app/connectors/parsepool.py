"""Parsing fetched documents in worker processes, off the fetch loop.

feedparser and the xml-ization of entries are CPU work in Python: a megabyte of feed
takes tens of milliseconds.  Done on the fetch loop, that time would hold every other
fetch (and the GIL the daemon's server and Spark's driver share).  :class:`ParsePool`
runs :func:`~roses_app.connectors.poller.parse_document` in ``workers`` processes
started by a fork server that has already imported the parser (a new worker costs a
fork, not an interpreter start).  A worker that dies (a crash in a C library on a
hostile document) fails only the polls it held: the pool is made anew for the next.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import select
import signal
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from roses_app.connectors.poller import Parsed, parse_document, parse_document_file
from roses_app.errors import FeedParseError

log = logging.getLogger(__name__)

PRELOAD = ["roses_app.connectors.poller"]  # feedparser, lxml and the xml-ization
PARENT_POLL_SECONDS = 1.0  # without pidfds: how often a worker checks the daemon is there
# A larger document reaches its worker through a file in ``spill_dir``: passed as an
# argument it would be pickled, a second copy in the daemon and two in the worker (a
# 50 MB feed: 140 MB more at the peak), where the file is read a part at a time.
SPILL_BYTES = 1 << 20
SPILL_PREFIX = "parse-"


def _init_worker(daemon_pid: int) -> None:
    # Ctrl-C reaches the whole process group: the daemon stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    threading.Thread(target=_exit_with, args=(daemon_pid,), daemon=True).start()


def _exit_with(daemon_pid: int) -> None:
    """End this worker when the daemon is gone (kill -9 included).

    A worker's parent is the fork server, not the daemon, and it holds its task queue's
    both ends and the fork server's liveness pipe: without this, a killed daemon left
    the worker and the fork server running for good."""
    try:
        watched = os.pidfd_open(daemon_pid)  # readable once the daemon has exited
    except OSError:  # the daemon is gone already, or pidfds are not there (Linux < 5.3)
        while _alive(daemon_pid):
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(0)
    select.select([watched], [], [])
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now has the pid
        return False
    return True


class ParsePool:
    """A process pool for :func:`parse_document`, used from one event loop."""

    def __init__(
        self, workers: int, max_items: int | None = None, spill_dir: Path | None = None
    ) -> None:
        self.workers = max(1, workers)
        self.max_items = max_items  # entries taken from a document (fetch.max_items)
        self.spill_dir = spill_dir or Path(tempfile.gettempdir())
        if spill_dir is not None:  # files a killed daemon left there
            for stale in spill_dir.glob(f"{SPILL_PREFIX}*"):
                stale.unlink(missing_ok=True)
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(PRELOAD)
        self._pool = self._new_pool()
        self._stopped = False
        self.restarts = 0

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            self.workers,
            mp_context=self._context,
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )

    async def parse(
        self, body: bytes, url: str, headers: Mapping[str, str], categories: tuple[str, ...]
    ) -> Parsed:
        pool = self._pool
        loop = asyncio.get_running_loop()
        spilled = await asyncio.to_thread(self._spill, body) if len(body) > SPILL_BYTES else None
        try:
            if spilled is not None:
                return await loop.run_in_executor(
                    pool, parse_document_file, spilled, url, dict(headers), categories,
                    self.max_items,
                )  # fmt: skip
            return await loop.run_in_executor(
                pool, parse_document, body, url, dict(headers), categories, self.max_items
            )
        except BrokenProcessPool as exc:
            if self._stopped:  # the daemon stops: the parse in flight ends with it
                raise FeedParseError(f"{url}: not parsed, the daemon is stopping") from exc
            if pool is self._pool:
                self.restarts += 1
                log.error("parse worker died on %s; starting the parse workers again", url)
                self._pool = self._new_pool()
                _terminate(pool)
            raise FeedParseError(
                f"{url}: the parse worker died on this document ({exc}); it is fetched "
                "again at the next poll"
            ) from exc
        finally:
            if spilled is not None:
                os.unlink(spilled)

    def _spill(self, body: bytes) -> str:
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=SPILL_PREFIX, suffix=".xml", dir=self.spill_dir)
        with os.fdopen(fd, "wb") as out:
            out.write(body)
        return path

    def shutdown(self) -> None:
        """Stop at once: queued parses are cancelled, workers terminated."""
        self._stopped = True
        _terminate(self._pool)


def _terminate(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(5.0)
