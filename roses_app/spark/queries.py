"""The running queries: waiting for those of a finite run, and stopping them.

``await_all`` waits for ``roses once`` and ``roses replay`` (and shows their progress);
``stop_gracefully`` lets the batch in flight finish when the daemon stops.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark import SparkContext
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming import StreamingQuery

from roses_app.errors import QueryError
from roses_app.spark.progress import RunProgress, running_tasks

log = logging.getLogger(__name__)


@dataclass
class RunningQuery:
    name: str  # "stateless" or a generation's id
    streams: frozenset[str]  # the streams whose output it writes
    query: StreamingQuery
    # starts the same query again from its checkpoint (after a failure)
    restart: Callable[[], StreamingQuery]


# Spark gives a Python process it starts for a stateful operator a fixed 10 s to
# connect back (no setting changes it); on a loaded machine it may miss that, and the
# query fails on its first batch.  Starting it again from its checkpoint is safe.
WORKER_TIMEOUT = "Python worker failed to connect back"
WORKER_RETRIES = 3


def await_all(
    queries: Sequence[RunningQuery],
    progress: Callable[[str], None] | None = None,
    total_events: int | None = None,
    every: int = 1,
) -> None:
    """Wait until every query has ended (a finite run); with ``progress``, hand it a
    line of what they have done every ``every`` seconds (see :mod:`.progress`).  A
    query whose Python worker did not connect back in time is started again."""
    counts = RunProgress(total_events)

    def report(tasks: tuple[int, int]) -> None:
        if progress is not None:
            progress(counts.line({r.name: r.query.recentProgress for r in queries}, tasks))

    for running in queries:
        retries = 0
        while True:
            try:
                while not running.query.awaitTermination(every):
                    report(running_tasks(SparkContext.getOrCreate()) if progress else (0, 0))
            except StreamingQueryException as exc:
                if WORKER_TIMEOUT not in str(exc) or retries >= WORKER_RETRIES:
                    raise QueryError(f"query {running.name} failed: {exc}") from exc
                retries += 1
                log.warning("query %s: %s; starting it again", running.name, WORKER_TIMEOUT)
                running.query = running.restart()
                continue
            break
        failure = running.query.exception()
        if failure is not None:
            raise QueryError(f"query {running.name} failed: {failure}") from failure
    report((0, 0))


def stop_gracefully(queries: Sequence[RunningQuery], timeout: float = 60.0) -> None:
    """Let a micro-batch in flight finish, then stop each query."""
    deadline = time.monotonic() + timeout
    for running in queries:
        while running.query.isActive and running.query.status.get("isTriggerActive"):
            if time.monotonic() > deadline:
                log.warning(
                    "query %s: batch still running after %.0fs, stopping it", running.name, timeout
                )
                break
            time.sleep(0.1)
        running.query.stop()
