"""The running queries: waiting for those of a finite run, and stopping them.

``await_all`` waits for ``roses once`` and ``roses replay`` (and shows their progress);
``stop_gracefully`` lets the batch in flight finish when the daemon stops, and abandons
it quietly past its time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from pyspark import SparkContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from roses_app.errors import QueryError
from roses_app.spark.progress import RunProgress, running_tasks

log = logging.getLogger(__name__)

# Set while queries are stopped in the middle of a batch: the batch's job is cancelled,
# and the foreachBatch handler waiting on it raises (see ``BatchAbandoned``).
ABANDONING = threading.Event()


class BatchAbandoned(QueryError):
    """A micro-batch cancelled to stop its query.  Raised instead of the cancelled
    job's Py4JJavaError, whose pages of Java traces py4j logged and whose message,
    handed back to Spark, overflowed the stack of the regex Spark reads it with
    (a StackOverflowError on the query's thread)."""


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


T = TypeVar("T")


def abandonable(qid: str, handle: Callable[[DataFrame, int], T]) -> Callable[[DataFrame, int], T]:
    """``handle`` (a foreachBatch handler), raising BatchAbandoned instead of whatever
    a batch cancelled to stop makes it raise."""

    def run(batch: DataFrame, batch_id: int) -> T:
        try:
            return handle(batch, batch_id)
        except Exception as exc:
            if not ABANDONING.is_set():
                raise
            raise BatchAbandoned(
                f"batch {batch_id} of query {qid} abandoned to stop ({type(exc).__name__})"
            ) from None  # a short error for Spark, not the cancelled job's

    return run


def stop_gracefully(queries: Sequence[RunningQuery], timeout: float = 60.0) -> None:
    """Let a micro-batch in flight finish, then stop each query; one still running
    after ``timeout`` is abandoned (it runs again at the next start: the checkpoint
    has not committed it)."""
    deadline = time.monotonic() + timeout
    for running in queries:
        while running.query.isActive and running.query.status.get("isTriggerActive"):
            if time.monotonic() > deadline:
                log.warning(
                    "query %s: batch still running after %.0fs, abandoning it (it runs again "
                    "at the next start)",
                    running.name,
                    timeout,
                )
                break
            time.sleep(0.1)
        else:
            running.query.stop()
            continue
        with _abandoning():
            running.query.stop()
            _tasks_ended(TASKS_END_SECONDS)


# After a batch is abandoned, how long its tasks may take to end (their Python worker
# is killed): the JVM stopped before then logged their end as errors, with traces.
TASKS_END_SECONDS = 10.0


def _tasks_ended(seconds: float) -> bool:
    """Wait until no task runs (at most ``seconds``); whether none does."""
    context = SparkContext._active_spark_context
    if context is None:
        return True
    tracker = context._jsc.sc().statusTracker()
    deadline = time.monotonic() + seconds
    while sum(info.numRunningTasks() for info in tracker.getExecutorInfos()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# Spark's log of the query ending with BatchAbandoned (its trace, at ERROR)
MICRO_BATCH_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution"


@contextmanager
def _abandoning() -> Iterator[None]:
    """While a query is stopped in the middle of a batch: ``ABANDONING`` set, and the
    traces logged of the handler's exception (py4j's, and Spark's of the query's end)
    silenced: the warning above says what happens."""
    py4j = logging.getLogger("py4j.clientserver")
    level = py4j.level
    py4j.setLevel(logging.CRITICAL)
    _spark_log_level(MICRO_BATCH_LOGGER, "OFF")
    ABANDONING.set()
    try:
        yield
    finally:
        ABANDONING.clear()
        py4j.setLevel(level)
        _spark_log_level(MICRO_BATCH_LOGGER, "WARN")  # as log4j2.properties sets it


def _spark_log_level(logger: str, level: str) -> None:
    jvm = SparkContext._jvm
    if jvm is not None:
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.toLevel(level))
