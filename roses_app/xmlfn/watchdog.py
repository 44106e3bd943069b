"""Evaluations outside the main thread's timer, stopped from another thread.

Only the main thread runs signal handlers, so :mod:`roses_app.xmlfn.budget`'s SIGALRM
cannot stop an expression evaluated by a thread of the daemon's server (a pull query,
the console's preview).  :class:`Watchdog` keeps each such evaluation's deadline; a
thread of its own looks at them a few times a second and sends
:class:`~roses_app.errors.ItemTimeout` (or :class:`~roses_app.errors.RequestTimeUp`, when
the deadline was the whole request's) to the thread of one past its deadline
(CPython's ``PyThreadState_SetAsyncExc``: raised at that thread's next bytecode, as a
signal handler's exception would be).

It is sent once per evaluation, and an evaluation that ends clears what was sent and
not yet raised: the exception can only come out of the evaluation it was meant for,
never later in other code.  Native code (lxml, Saxon) runs on until it returns to
Python; Saxon has its own guard (:mod:`roses_app.xmlfn.xqguard`).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

from roses_app.errors import ItemTimeout

TICK_SECONDS = 0.1  # how late past its deadline an evaluation may be stopped

# No argtypes on purpose: ``None`` must reach C as NULL (clear), which a py_object
# argument would turn into Python's None.
_SET_ASYNC_EXC = ctypes.pythonapi.PyThreadState_SetAsyncExc


def _send(thread: int, exc: type[BaseException] | None) -> None:
    _SET_ASYNC_EXC(ctypes.c_ulong(thread), None if exc is None else ctypes.py_object(exc))


class Watchdog:
    """Deadlines of evaluations by thread; :meth:`watch` and :meth:`unwatch` are
    called by the evaluating thread itself."""

    def __init__(self, tick: float = TICK_SECONDS) -> None:
        self.tick = tick
        self._lock = threading.Lock()
        # thread -> monotonic deadline, and what to send it past that
        self._deadlines: dict[int, tuple[float, type[ItemTimeout]]] = {}
        self._sent: set[int] = set()  # threads sent a stop their evaluation may not have seen
        self._thread: threading.Thread | None = None
        self.stopped = 0  # evaluations stopped (for tests and counts)

    def watch(self, deadline: float, stop: type[ItemTimeout] = ItemTimeout) -> None:
        """This thread's evaluation must end by ``deadline`` (time.monotonic): past it,
        ``stop`` is raised there (a subclass says whose limit it was)."""
        me = threading.get_ident()
        with self._lock:
            self._deadlines[me] = (deadline, stop)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="xpath-watchdog",
                                                daemon=True)  # fmt: skip
                self._thread.start()

    def unwatch(self) -> None:
        """This thread's evaluation has ended: a stop sent and not yet raised is
        cleared, so that it cannot come out of other code."""
        me = threading.get_ident()
        with self._lock:
            self._deadlines.pop(me, None)
            if me in self._sent:
                self._sent.discard(me)
                _send(me, None)

    def _run(self) -> None:
        # a look each tick, even with nothing to watch: evaluations start and end by
        # the thousand a second, and waking this thread at each would cost more
        while True:
            time.sleep(self.tick)
            with self._lock:
                now = time.monotonic()
                for thread, (deadline, stop) in list(self._deadlines.items()):
                    if now > deadline:
                        del self._deadlines[thread]  # once: see the module docstring
                        self._sent.add(thread)
                        self.stopped += 1
                        _send(thread, stop)

    def forget(self) -> None:
        """A forked child starts afresh: no watchdog thread there, and the lock may
        have been held by the parent's at the fork."""
        self._lock = threading.Lock()
        self._deadlines.clear()
        self._sent.clear()
        self._thread = None


WATCHDOG = Watchdog()
os.register_at_fork(after_in_child=WATCHDOG.forget)
