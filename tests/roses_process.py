"""`roses run` as a user starts it, for end-to-end tests: a config written to
feeds.yaml, the daemon a child process logging to roses.log, its /healthz, a SIGTERM
stop and a kill for the test's cleanup."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from test_e2e import free_port


class RosesProcess:
    """`roses run -c feeds.yaml` in ``tmp_path`` on a free port (``settings.http.port``
    is set into ``config``)."""

    def __init__(self, tmp_path: Path, config: dict[str, Any]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = config.setdefault("settings", {})
        settings.setdefault("http", {})["port"] = self.port
        (tmp_path / "feeds.yaml").write_text(yaml.safe_dump(config, width=1000))
        self.log = tmp_path / "roses.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "roses_app.cli", "run", "-c", "feeds.yaml"],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )

    def health(self) -> dict[str, Any] | None:
        """/healthz when it answers 200; None before; fails the test once it exited."""
        if self.proc.poll() is not None:
            raise AssertionError(f"roses run exited:\n{self.log.read_text()[-4000:]}")
        try:
            reply = httpx.get(f"{self.url}/healthz", timeout=5)
        except httpx.HTTPError:
            return None
        return reply.json() if reply.status_code == 200 else None

    def stop(self, timeout: float = 120) -> tuple[int, float, str]:
        """SIGTERM: the exit code, the seconds it took, the log."""
        stopping = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - stopping, self.log.read_text()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
