"""ROSES on a real Spark standalone cluster (master and one worker on 127.0.0.1).

``roses replay --engine spark`` runs as its own driver process with
``settings.spark.master: spark://127.0.0.1:PORT``; its Python UDFs run in the worker's
executors, in this virtualenv's interpreter (PYSPARK_PYTHON), which must import
roses_app.  Its output must be the reference engine's and the fixture's expected files,
and the master must list the finished application.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import yaml
from cluster_support import StandaloneCluster, start_cluster

from roses_app.errors import JavaNotFoundError

REPO = Path(__file__).resolve().parent.parent
REPLAY = Path(__file__).resolve().parent / "data" / "replay"
# (fixture, streams): seed_time's eleven queries take minutes on two shared cores, so
# only one of each kind of stateful lowering runs: a sequential operator (a window's
# delta: transformWithStateInPandas, its state on the executor), a stream-stream full
# outer join and a group-by (streaming aggregation); all with pandas UDFs.
CASES: list[tuple[str, tuple[str, ...]]] = [
    ("spine", ()),
    ("seed_time", ("delta_delete", "full_outer", "group_by")),
]
ROSES = [sys.executable, "-m", "roses_app.cli"]
REPLAY_TIMEOUT_S = 240.0

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    root = tmp_path_factory.mktemp("spark-cluster")
    try:
        running = start_cluster(root, java_cache_dir=REPO / ".cache" / "java")
    except JavaNotFoundError as exc:  # a failure, not a skip: the suite promises Java
        pytest.fail(f"cannot start a Spark cluster without Java: {exc}")
    try:
        yield running
    finally:
        running.stop()


def test_cluster_has_one_worker_running_this_python(cluster: StandaloneCluster) -> None:
    assert cluster.env["PYSPARK_PYTHON"] == sys.executable
    state = cluster.state()
    assert state["aliveworkers"] == 1 and state["cores"] == 2, state
    assert os.access(cluster.env["PYSPARK_PYTHON"], os.X_OK)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.jsonl"))}


class _KeysAsWritten(yaml.SafeLoader):
    """safe_load, but mapping keys stay as written (``on:`` is "on", not True), as in
    roses_app.config.yamlmarks; safe_dump quotes such keys back."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        self.flatten_mapping(node)
        return {
            key.value if isinstance(key, yaml.ScalarNode) else self.construct_object(key, deep): (
                self.construct_object(value, deep)
            )
            for key, value in node.value
        }


def cluster_config(fixture: Path, work: Path, master_url: str, streams: Sequence[str]) -> Path:
    """The fixture's feeds.yaml with only ``streams`` (all when empty), its data_dir
    under ``work`` and the cluster's master."""
    text = (fixture / "feeds.yaml").read_text(encoding="utf-8")
    doc = yaml.load(text, Loader=_KeysAsWritten)
    if streams:
        doc["streams"] = {name: doc["streams"][name] for name in streams}
    settings = doc.get("settings") or {}
    settings["data_dir"] = str(work / "data")
    settings["spark"] = {
        "master": master_url,
        "shuffle_partitions": 2,
        "conf": {"spark.executor.memory": "1g", "spark.cores.max": "2"},
    }
    doc["settings"] = settings
    path = work / "feeds.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def replay(
    config: Path, events: Path, out: Path, engine: str, env: dict[str, str], tmp: Path
) -> subprocess.CompletedProcess[str]:
    tmp.mkdir(parents=True, exist_ok=True)
    args = ["replay", "-c", str(config), "--events", str(events), "--out", str(out)]
    return subprocess.run(
        [*ROSES, *args, "--engine", engine],
        env={**env, "TMPDIR": str(tmp)},  # the replay's spool, checkpoints and views
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=REPLAY_TIMEOUT_S,
        check=False,
    )


def roses_apps(cluster: StandaloneCluster) -> list[dict[str, object]]:
    return [app for app in cluster.state()["completedapps"] if app["name"] == "roses"]


def only(files: dict[str, str], streams: Sequence[str]) -> dict[str, str]:
    """The output files of ``streams`` (``S.jsonl`` and a split's ``S/VALUE.jsonl``)."""
    return {
        p: text for p, text in files.items() if Path(p).parts[0].removesuffix(".jsonl") in streams
    }


@pytest.mark.parametrize(("name", "streams"), CASES, ids=[name for name, _ in CASES])
def test_replay_on_standalone_cluster(
    name: str, streams: tuple[str, ...], cluster: StandaloneCluster, tmp_path: Path
) -> None:
    fixture = REPLAY / name
    config = cluster_config(fixture, tmp_path, cluster.master_url, streams)
    events = fixture / "events.jsonl"
    before = {app["id"] for app in roses_apps(cluster)}

    started = time.monotonic()
    done = replay(config, events, tmp_path / "spark", "spark", cluster.env, tmp_path / "tmp")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, (
        f"roses replay --engine spark on {cluster.master_url} failed ({done.returncode}):\n"
        f"{done.stdout}\n{done.stderr[-6000:]}\n{cluster.logs()}"
    )
    print(f"\n{name}: roses replay --engine spark on {cluster.master_url}: {elapsed:.1f}s")
    reference = replay(config, events, tmp_path / "ref", "reference", cluster.env, tmp_path / "tmp")
    assert reference.returncode == 0, reference.stderr

    spark_files = tree(tmp_path / "spark")
    assert spark_files, done.stdout
    assert spark_files == tree(tmp_path / "ref")
    expected = tree(fixture / "expected")
    assert spark_files == (only(expected, streams) if streams else expected)

    # It ran on the cluster: the master lists one more finished application named
    # roses, and the worker ran its executor(s) (their logs are in its work dir).
    deadline = time.monotonic() + 30.0
    while not (new := [a for a in roses_apps(cluster) if a["id"] not in before]):
        assert time.monotonic() < deadline, f"no completed roses app: {cluster.state()}"
        time.sleep(0.5)
    (app,) = new
    assert app["state"] == "FINISHED", app
    app_dir = cluster.worker_dir / str(app["id"])
    assert app_dir.is_dir(), f"the worker ran no executor for {app['id']}\n{cluster.logs()}"
    assert any((d / "stderr").is_file() for d in app_dir.iterdir()), sorted(app_dir.rglob("*"))
    shutil.rmtree(tmp_path / "tmp", ignore_errors=True)
