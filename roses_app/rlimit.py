"""The data memory limit of Python workers (``settings.limits.worker_memory``).

RLIMIT_DATA, not RLIMIT_AS (what pyspark sets for ``spark.executor.pyspark.memory``):
Saxon's native image reserves 32 GB of address space as it loads, which RLIMIT_AS
counts and RLIMIT_DATA does not.  An allocation past the limit raises MemoryError in
the evaluation that asked for it, which drops that item.  This module imports only the
standard library: Spark's Python daemon (:mod:`roses_app.spark.pydaemon`) applies it
before it forks anything.
"""

from __future__ import annotations

import resource
import sys

MEMORY_ENV = "ROSES_WORKER_MEMORY"  # bytes; 0 or unset: no limit


def limit_memory(wanted: int | None) -> int | None:
    """Set this process's soft RLIMIT_DATA to ``wanted`` bytes (within the hard limit),
    kept by the processes it forks; None or 0 lifts it to the hard limit.  The limit
    set, None for none."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if not wanted or wanted <= 0:
        resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))
        return None
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (wanted, hard))
    return wanted


def memory_from_env(text: str) -> int | None:
    """``ROSES_WORKER_MEMORY``'s bytes; not a number is no limit, said on stderr (a
    daemon that failed here would fail every query)."""
    try:
        return int(text or 0) or None
    except ValueError:
        print(f"roses: {MEMORY_ENV}={text!r} is no number of bytes: no limit", file=sys.stderr)
        return None
