"""Spark's Python daemon as ROSES runs it (roses_app.spark.pydaemon): its workers run
pyspark's compiled code, not its zip."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from roses_app.spark.pydaemon import bundled_zips


def installed(site: Path, *packages: str) -> Path:
    """A site folder with ``packages`` installed and pyspark's bundled zips; its lib."""
    for name in packages:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    return lib


def test_the_zips_of_the_installed_pyspark_are_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = installed(site, "pyspark", "py4j")
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), "/x", str(site)]
    assert bundled_zips(path) == path[:2]


def test_a_zip_whose_package_is_not_installed_beside_it_stays(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = installed(site, "pyspark")  # no py4j package: its zip is the only copy
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(site)]
    assert bundled_zips(path) == path[:1]


def test_the_zips_of_another_spark_home_stay(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    installed(site, "pyspark", "py4j")
    home = tmp_path / "opt" / "spark" / "python" / "lib"  # a Spark distribution
    home.mkdir(parents=True)
    path = [str(home / "pyspark.zip"), str(home / "py4j-0.10.9.9-src.zip"), str(site)]
    assert bundled_zips(path) == []


def test_a_site_on_the_path_through_a_symbolic_link_is_the_same(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "site-packages"
    lib = installed(site, "pyspark", "py4j")
    (tmp_path / "lib64").symlink_to(tmp_path / "lib")  # as a venv's lib64
    path = [str(lib / "pyspark.zip"), str(tmp_path / "lib64" / "site-packages")]
    assert bundled_zips(path) == path[:1]


def test_nothing_is_dropped_when_the_package_is_not_on_the_path(tmp_path: Path) -> None:
    lib = installed(tmp_path / "site-packages", "pyspark", "py4j")
    assert bundled_zips([str(lib / "pyspark.zip")]) == []


@pytest.mark.spark
def test_spark_workers_run_the_installed_compiled_pyspark(spark: object) -> None:
    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyspark.worker

        zips = [entry for entry in sys.path if entry.endswith(".zip")]
        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {
                    "file": [pyspark.worker.__file__] * batch.num_rows,
                    "cached": [pyspark.worker.__cached__] * batch.num_rows,
                    "zips": [" ".join(zips)] * batch.num_rows,
                }
            )

    ddl = "file STRING, cached STRING, zips STRING"
    frame = spark.range(4, numPartitions=2).mapInArrow(probe, ddl)  # type: ignore[attr-defined]
    rows = frame.collect()
    assert len(rows) == 4
    for row in rows:
        assert row.file.endswith("/pyspark/worker.py") and ".zip" not in row.file, row.file
        # its bytecode on disk: scripts/bootstrap.sh compiles it (roses_compile_pyspark)
        assert row.cached and Path(row.cached).is_file(), f"no bytecode: {row.cached}"
        assert "pyspark.zip" not in row.zips and "py4j" not in row.zips, row.zips
