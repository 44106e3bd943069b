"""Spark's Python daemon as ROSES runs it (roses_app.spark.pydaemon): its workers import
pyspark from its installed source files, not its zip.  Whether bytecode files exist is
no part of the check: under PYTHONDONTWRITEBYTECODE nothing writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest

from roses_app.spark.pydaemon import bundled_zips

# What a worker reports about the pyspark it imported (run in the worker, or in a child)
PROBE = """
import json, sys
from roses_app.spark.pydaemon import drop_bundled_zips
drop_bundled_zips()
import pyspark.worker
print(json.dumps({
    "file": pyspark.worker.__file__,
    "loader": type(pyspark.worker.__loader__).__name__,
    "cached": pyspark.worker.__cached__,
    "zips": [entry for entry in sys.path if entry.endswith(".zip")],
    "dont_write_bytecode": sys.flags.dont_write_bytecode,
}))
"""


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


def test_a_worker_path_without_any_bytecode_imports_the_installed_sources(
    tmp_path: Path,
) -> None:
    """A worker's path as Spark makes it (the bundled zips first), in a Python that
    writes no bytecode and finds none (an empty bytecode folder): pyspark still comes
    from its installed source files, and nothing is written."""
    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = sorted(str(zip_) for zip_ in lib.glob("*.zip"))
    assert any(zip_.endswith("pyspark.zip") for zip_ in zips), f"no bundled zips in {lib}"
    empty = tmp_path / "pycache"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(zips),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": str(empty),  # no bytecode written before can be read
    }
    # control: without the daemon's step the zip's copy is the one imported
    control = PROBE.replace("drop_bundled_zips()\n", "", 1)
    for code, from_zip in ((control, True), (PROBE, False)):
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        seen = json.loads(run.stdout)
        assert seen["dont_write_bytecode"] == 1
        assert (".zip" in seen["file"]) is from_zip, seen
        if not from_zip:
            assert seen["file"] == str(Path(pyspark.__file__).parent / "worker.py"), seen
            assert seen["loader"] == "SourceFileLoader", seen
            assert seen["cached"].startswith(str(empty)), seen  # read nothing compiled before
            assert not [z for z in seen["zips"] if z in zips], seen  # python3XX.zip stays
    assert not empty.exists() or not any(empty.rglob("*.pyc"))


@pytest.mark.spark
def test_spark_workers_run_the_installed_pyspark(spark: object) -> None:
    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyspark.worker

        zips = [entry for entry in sys.path if entry.endswith(".zip")]
        loader = type(pyspark.worker.__loader__).__name__
        for batch in batches:
            yield pa.RecordBatch.from_pydict(
                {
                    "file": [pyspark.worker.__file__] * batch.num_rows,
                    "loader": [loader] * batch.num_rows,
                    "zips": [" ".join(zips)] * batch.num_rows,
                }
            )

    ddl = "file STRING, loader STRING, zips STRING"
    frame = spark.range(4, numPartitions=2).mapInArrow(probe, ddl)  # type: ignore[attr-defined]
    rows = frame.collect()
    assert len(rows) == 4
    for row in rows:
        assert row.file.endswith("/pyspark/worker.py") and ".zip" not in row.file, row.file
        # from its source file (whose bytecode is cached where Python may write it), not
        # the zip; whether a .pyc exists is not asked (PYTHONDONTWRITEBYTECODE writes none)
        assert row.loader == "SourceFileLoader", row.loader
        assert "pyspark.zip" not in row.zips and "py4j" not in row.zips, row.zips
