"""Helper processes that take a share of a large XQuery batch (opt-in).

Saxon holds the GIL and one processor serves one thread at a time, so a Python
process runs XQuery on one core.  With ``ROSES_XQUERY_PROCESSES=N`` (N > 1) a process
starts N - 1 helper processes, each with its own Saxon, and a batch of at least
``MIN_SHARE`` units per process is cut into N shares: the helpers evaluate theirs
while the caller evaluates the first.  The results come back in order, and the
caller's error hook gets the items each helper dropped, with their errors, share
after share, as if it had run everything itself.

Leave it at 1 (the default) where something else already keeps every core busy, e.g.
Spark, which runs one Python worker per core: helpers there only compete with them.

A helper is a Python process running :func:`roses_app.xmlfn.xqhelper.main` with two
pipes: pickled requests come in on one pipe, replies go out on the other.  It says
"ready" once Saxon is loaded; until then (and whenever a helper is busy with another
thread's batch, or has died) the caller evaluates that share itself.  A helper exits
when its pipe closes, i.e. when the process that started it exits.  A forked child
starts its own helpers.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from lxml import etree

from roses_app.errors import EvaluationError

log = logging.getLogger(__name__)

ENV = "ROSES_XQUERY_PROCESSES"
# Units per process below which a share is not worth its pipes and Saxon call (a
# millisecond or two, against some 30 µs an item).
MIN_SHARE = 1000

# A reply: the results of the share and the (item, exception) pairs it dropped.
Reply = tuple[list[str | None], list[tuple[str | None, Exception]]]


def processes() -> int:
    """How many processes evaluate a large batch (``ROSES_XQUERY_PROCESSES``, default 1)."""
    value = os.environ.get(ENV, "").strip()
    try:
        return max(1, int(value)) if value else 1
    except ValueError:
        log.warning("%s=%r is not a number: using 1", ENV, value)
        return 1


@dataclass
class Helper:
    """One helper process and the caller's ends of its two pipes."""

    process: subprocess.Popen[bytes]
    requests: Connection
    replies: Connection
    ready: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def alive(self) -> bool:
        return self.process.poll() is None

    def try_take(self) -> bool:
        """Reserve the helper for one share if it is ready and idle (no waiting)."""
        if not self.ready:
            if not self.alive() or not self.replies.poll():
                return False
            try:
                self.ready = self.replies.recv() == "ready"
            except (EOFError, OSError):
                return False
        return self.lock.acquire(blocking=False)

    def submit(self, request: Any) -> bool:
        """Send a share (with the helper taken); False if the helper is gone."""
        try:
            self.requests.send(request)
        except (OSError, ValueError) as exc:
            log.warning("XQuery helper %d is gone (%s)", self.process.pid, exc)
            self.lock.release()
            return False
        return True

    def result(self) -> Reply | None:
        """The reply to the share submitted (and the helper released); None on failure."""
        try:
            reply = self.replies.recv()
        except (EOFError, OSError) as exc:
            log.warning("XQuery helper %d is gone (%s)", self.process.pid, exc or "EOF")
            return None
        finally:
            self.lock.release()
        if reply[0] != "ok":
            log.warning("XQuery helper %d failed on a share: %s", self.process.pid, reply[1])
            return None
        return reply[1], [(xml, restore(exc)) for xml, exc in reply[2]]

    def close(self) -> None:
        self.requests.close()
        self.replies.close()


_pool: dict[str, list[Helper]] = {"helpers": []}
_pool_lock = threading.Lock()


# The helper's program (:mod:`roses_app.xmlfn.xqhelper`), which this module does not
# import: it imports the XQuery evaluation, which imports this module.
_HELPER_MAIN = "import sys; from roses_app.xmlfn.xqhelper import main; main(sys.argv)"


def start_helper(stderr: IO[bytes] | None = None) -> Helper:
    """A new helper process (it says "ready" once Saxon is loaded); its standard
    error goes to ``stderr`` (default: this process's)."""
    requests_fd, to_helper = os.pipe()  # the helper reads requests_fd
    from_helper, replies_fd = os.pipe()  # the helper writes replies_fd
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env[ENV] = "1"  # a helper does not start helpers
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _HELPER_MAIN, str(requests_fd), str(replies_fd)],
            pass_fds=(requests_fd, replies_fd),
            stdin=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    finally:
        os.close(requests_fd)
        os.close(replies_fd)
    requests = Connection(to_helper, readable=False)
    replies = Connection(from_helper, writable=False)
    return Helper(process, requests, replies)


def _helpers(wanted: int) -> list[Helper]:
    """This process's helpers (call with ``_pool_lock`` held): the dead are replaced."""
    helpers: list[Helper] = []
    for helper in _pool["helpers"]:
        if helper.alive() or helper.lock.locked():
            helpers.append(helper)
        else:
            log.warning("XQuery helper %d exited (%s)", helper.process.pid, helper.process.poll())
            helper.close()
    while len(helpers) < wanted:
        try:
            helpers.append(start_helper())
        except OSError as exc:  # no helper then: the caller runs everything itself
            log.warning("cannot start an XQuery helper process: %s", exc)
            break
    _pool["helpers"] = helpers
    return helpers


def _forget_after_fork() -> None:
    """A forked child starts its own helpers; the parent's pipes are closed here."""
    global _pool_lock
    _pool_lock = threading.Lock()  # another thread of the parent may have held it
    for helper in _pool["helpers"]:
        helper.close()
    _pool["helpers"] = []


os.register_at_fork(after_in_child=_forget_after_fork)


def take(units: int) -> list[Helper]:
    """Helpers reserved for shares of a batch of ``units`` (none for a small batch).

    Each one returned must get exactly one ``submit`` (then ``result``) or be
    released with ``helper.lock.release()``.
    """
    wanted = min(processes(), units // MIN_SHARE) - 1
    if wanted <= 0:
        return []
    with _pool_lock:
        return [helper for helper in _helpers(wanted)[:wanted] if helper.try_take()]


def wait_ready(timeout: float = 60.0) -> bool:
    """Start the helpers and wait until they are all ready (benchmarks, tests)."""
    deadline = time.monotonic() + timeout
    with _pool_lock:
        helpers = _helpers(processes() - 1)
    for helper in helpers:
        while not helper.try_take():
            if not helper.alive() or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        helper.lock.release()
    return True


def stop() -> None:
    """Stop this process's helpers: close their pipes and wait for them to exit."""
    with _pool_lock:
        helpers = _pool["helpers"]
        _pool["helpers"] = []
    for helper in helpers:
        helper.close()
        try:
            helper.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            helper.process.kill()
            helper.process.wait()


# -- exceptions across the pipe ----------------------------------------------------------


@dataclass(frozen=True)
class _SyntaxError:
    """An lxml XMLSyntaxError, which does not pickle (its error log does not)."""

    message: str
    code: int
    line: int
    column: int
    filename: str | None


def portable(exc: Exception) -> Exception | _SyntaxError:
    """``exc``, or what ``restore`` turns back into it, ready to be pickled."""
    if isinstance(exc, etree.XMLSyntaxError):
        return _SyntaxError(exc.msg, exc.code, exc.lineno, exc.offset, exc.filename)
    try:
        pickle.dumps(exc)
    except (pickle.PicklingError, TypeError, AttributeError):
        return EvaluationError(f"{type(exc).__name__}: {exc}")
    return exc


def restore(exc: Exception | _SyntaxError) -> Exception:
    if isinstance(exc, _SyntaxError):
        return etree.XMLSyntaxError(exc.message, exc.code, exc.line, exc.column, exc.filename)
    return exc
