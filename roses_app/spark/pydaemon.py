"""Spark's Python daemon (``spark.python.daemon.module``), run from compiled code.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on its Python
workers' path.  Python cannot cache the bytecode of modules imported from a zip:
every daemon and worker then compiles pyspark's sources again, and each worker's
``importlib.invalidate_caches()`` reads the zip's directory of 1,500 files again: up to
a second of CPU per process at the start of every run.  When the zips are the ones
inside the installed pyspark package (a pip install, ``SPARK_HOME`` that package), the
same code is on the path uncompressed, with its bytecode: this module drops the zips
from the path before anything of pyspark is imported, then runs pyspark's daemon.
With any other ``SPARK_HOME`` (a Spark distribution on a cluster) the path is left as
Spark made it.  Nothing else is imported before the daemon forks its workers: pyspark
keeps even its worker module out of the daemon, since pandas and pyarrow start threads
when imported, and a fork copies only the forking thread.

The daemon also bounds its workers' data memory (``settings.limits.worker_memory``,
passed as ``ROSES_WORKER_MEMORY``; see :mod:`roses_app.rlimit`): they inherit it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from roses_app.rlimit import MEMORY_ENV, limit_memory, memory_from_env


def bundled_zips(path: Sequence[str]) -> list[str]:
    """The entries of ``path`` that are zips in an installed pyspark package's
    ``python/lib`` whose package (``pyspark``, ``py4j``) is also installed beside it
    on ``path``: the same code is found without them."""
    # SPARK_HOME is a resolved path (pyspark's find_spark_home); the path's entries may
    # not be (a venv's lib64 link)
    real = {os.path.realpath(entry) for entry in path}
    found = []
    for entry in path:
        lib = os.path.dirname(entry)
        package = os.path.dirname(os.path.dirname(lib))
        site = os.path.dirname(package)
        name = os.path.basename(entry).split("-")[0].removesuffix(".zip")
        if (
            entry.endswith(".zip")
            and lib == os.path.join(package, "python", "lib")
            and os.path.basename(package) == "pyspark"
            and os.path.realpath(site) in real
            and os.path.isfile(os.path.join(site, name, "__init__.py"))
        ):
            found.append(entry)
    return found


def drop_bundled_zips() -> None:
    """Take :func:`bundled_zips` off ``sys.path``: pyspark is then imported from its
    source files, whose bytecode Python reads or writes (where it may) as for any
    module; whether that bytecode exists yet changes only how fast workers start."""
    zips = set(bundled_zips(sys.path))
    sys.path[:] = [entry for entry in sys.path if entry not in zips]


def main() -> None:
    limit_memory(memory_from_env(os.environ.get(MEMORY_ENV, "")))
    drop_bundled_zips()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
