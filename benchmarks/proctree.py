"""Process trees for the benchmarks: descendants, resident memory, CPU time and
a thread that samples a tree's peak memory; Linux (/proc), psutil when the venv has it.

Imported by the benchmarks in this folder (run as `python benchmarks/X.py`, which puts the
folder on sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

try:  # psutil when the venv has it, else /proc directly
    import psutil
except ImportError:  # pragma: no cover - depends on the venv
    psutil = None

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def children() -> dict[int, list[int]]:
    """Every process's children, by parent pid."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def tree_pids(root: int) -> list[int]:
    """root and all its descendants that are alive now."""
    if psutil is not None:
        try:
            return [root] + [p.pid for p in psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            return []
    tree, todo, found = children(), [root], []
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _kb_field(path: str, key: str) -> int:
    """Bytes of the ``key: N kB`` line of a /proc file; 0 when the process is gone."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        return 0
    return 0


def pss_bytes(pid: int) -> int:
    """The proportional set size of one process (its private pages, and its share of
    those it shares: forked workers' RSS counts their parent's pages again, PSS
    does not, so the PSS of a tree adds up to what it takes); 0 when it is gone."""
    return _kb_field(f"/proc/{pid}/smaps_rollup", "Pss:")


def high_water(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM); 0 when it is gone."""
    return _kb_field(f"/proc/{pid}/status", "VmHWM:")


def rss_bytes(pid: int) -> int:
    """The resident memory of one process; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def command_name(pid: int) -> str:
    """The process's command name (/proc/PID/comm, e.g. "java"); "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def cpu_seconds(pid: int) -> float:
    """User + system time of the process and of its reaped children."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(v) for v in fields[11:15]) / CLOCK_TICKS  # utime stime cutime cstime


def tree_cpu_over(root: int, seconds: float, every: float = 0.5) -> float:
    """The CPU seconds a process tree uses over the next ``seconds``: per process, its
    last sample minus its first (from 0 for one started meanwhile).  Sampling matters:
    Spark's Python daemon does not reap its workers, so the time of a worker that
    exits is in no parent's; one exiting between two samples loses at most ``every``
    seconds of it (two samples, before and after, lost all of it, and the figure
    could come out negative)."""
    first = {pid: cpu_seconds(pid) for pid in tree_pids(root)}
    last = dict(first)
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        time.sleep(min(every, deadline - now))
        for pid in tree_pids(root):
            cpu = cpu_seconds(pid)
            if cpu:  # 0.0: gone meanwhile
                last[pid] = cpu
                first.setdefault(pid, 0.0)
    return sum(last[pid] - first[pid] for pid in last)


class PeakSampler(threading.Thread):
    """Samples the resident memory of a process tree every `every` seconds.

    peak: the highest sum over the whole tree.  With `kind` (pid -> a label, "" for a
    process to leave out), also peaks[label]: the highest sum over the processes of
    that label.  With `pss`, also peak_pss: the highest sum of the tree's PSS (each
    shared page counted once).  start() and stop(), or a `with` block."""

    def __init__(
        self,
        root: int,
        every: float = 0.2,
        kind: Callable[[int], str] | None = None,
        pss: bool = False,
    ) -> None:
        super().__init__(daemon=True)
        self.root, self.every, self.kind, self.peak = root, every, kind, 0
        self.pss, self.peak_pss = pss, 0
        self.peaks: dict[str, int] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.every)

    def sample(self) -> None:
        now: dict[str, int] = {}
        pss = 0
        for pid in tree_pids(self.root):
            label = self.kind(pid) if self.kind is not None else "all"
            if label:
                now[label] = now.get(label, 0) + rss_bytes(pid)
                pss += pss_bytes(pid) if self.pss else 0
        self.peak = max(self.peak, sum(now.values()))
        self.peak_pss = max(self.peak_pss, pss)
        for label, value in now.items():
            self.peaks[label] = max(self.peaks.get(label, 0), value)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak

    def __enter__(self) -> PeakSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_tree(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """End a child started with start_new_session=True, and its process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill``, ``pkill``) raise SystemExit in this process, so that a
    benchmark stopped that way stops the child it waits on (``stop_tree`` in its
    cleanup) instead of leaving it running in its own session, spoiling later runs."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
