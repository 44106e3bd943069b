"""Shared fixtures: one SparkSession for the whole run, local[2], small shuffles."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_connector_support import feed_server  # noqa: F401  (a fixture for every test)

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from roses_app.config.model import SparkSettings
    from roses_app.spark.session import build_session

    session = build_session(
        SparkSettings(master="local[2]", shuffle_partitions=2), REPO / ".cache" / "java"
    )
    yield session
    session.stop()
