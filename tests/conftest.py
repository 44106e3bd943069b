"""Shared fixtures: one SparkSession for the whole run, local[2], small shuffles.

Also the ``requires`` marker: ``@pytest.mark.requires("newsboat")`` skips a test, before
its fixtures are set up, when the system lacks what it needs (failed under CI); see
``system_packages.require``, which fixtures call for the same check.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from raw_http_support import raw_server  # noqa: F401  (a fixture for every test)
from system_packages import NEEDS, require
from test_connector_support import feed_server  # noqa: F401  (a fixture for every test)

# code kept as its authors wrote it (the feed validator): not tests of ours
collect_ignore = ["third_party"]

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"requires(name, ...): needs a system program or data ({', '.join(NEEDS)}); "
        "skipped with the command that installs it when missing, failed under CI",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``--dist loadgroup``), every test on the shared SparkSession
    or marked ``spark`` goes to one worker: one session JVM for the run, not one per
    worker.  The daemons and the fast tests are shared out between the workers; while
    one worker waits on Spark, the other has a core."""
    for item in items:
        uses_session = "spark" in getattr(item, "fixturenames", ())
        if uses_session or item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(autouse=True)
def _expression_time_limit() -> Iterator[None]:
    """The process's per-item time limit as it was: a Daemon or a CLI command sets it
    from its config (a test's ``item_time: 1s`` must not outlive that test)."""
    from roses_app.xmlfn import budget

    limit, env = budget.limit(), os.environ.get(budget.ENV)
    yield
    budget.configure(limit)
    if env is None:
        os.environ.pop(budget.ENV, None)
    else:
        os.environ[budget.ENV] = env


@pytest.hookimpl(tryfirst=True)  # before the fixtures: a skipped test starts nothing
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires"):
        for name in mark.args:
            require(name)


# Test runs share 2 cores: what Spark lets a starved Python process take is raised where
# Spark has a setting for it.  (The Python process a transformWithState operator starts
# on the driver when its query starts has a fixed 10 s: a query that misses it fails
# with "Python worker failed to connect back" and must be started again.)
LOADED_MACHINE_CONF = (
    # How long the JVM waits for this driver's Python to connect back when it serves
    # results, e.g. each micro-batch's toArrow() (default 15 s).
    ("spark.python.authenticate.socketTimeout", "120s"),
    # A Python worker that dies shows its Python traceback, not only "crashed".
    ("spark.python.worker.faulthandler.enabled", "true"),
)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from roses_app.config.model import SparkSettings
    from roses_app.spark.session import build_session

    settings = SparkSettings(master="local[2]", shuffle_partitions=2, conf=LOADED_MACHINE_CONF)
    session = build_session(settings, REPO / ".cache" / "java")
    yield session
    session.stop()
