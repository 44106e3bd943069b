"""One data folder, one ROSES process: an exclusive ``flock`` on ``DATA_DIR/roses.lock``.

The lock lives as long as the open file description behind it: the process that took
it, and the Spark JVM that inherits it (it writes the checkpoints), so it is released
when both are gone, even after ``kill -9``.  Nothing to clean up after a crash: the
file stays, the lock does not.  The file says who holds it, for the refusal message.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from roses_app.errors import DataDirInUseError

LOCK_NAME = "roses.lock"


def holder(text: str) -> tuple[int | None, str]:
    """The PID and description written in a lock file (None when unreadable)."""
    pid_text, _, what = text.strip().partition(" ")
    return (int(pid_text) if pid_text.isdigit() else None), what


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class DataDirLock:
    """The lock on one data folder; ``acquire`` refuses at once when it is taken."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            os.close(fd)
            raise DataDirInUseError(self._refusal(text)) from exc
        except BaseException:
            os.close(fd)
            raise
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        command = " ".join(["roses", *sys.argv[1:]])
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command} (since {started})\n".encode(), 0)
        self.fd = fd

    def _refusal(self, text: str) -> str:
        pid, what = holder(text)
        who = f"PID {pid}" if pid is not None else "another process"
        if what:
            who += f" ({what})"
        message = f"the data folder {self.data_dir} is in use by ROSES {who}"
        if pid is not None and not alive(pid):
            return (
                f"{message}: that process has ended and its Spark JVM is still stopping; "
                "try again in a few seconds"
            )
        return (
            message + ": stop it first, or give this config another settings.data_dir "
            "(one data folder serves one ROSES process)"
        )

    def release(self) -> None:
        """Close our descriptor; the lock goes once an inheriting JVM has exited too."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
