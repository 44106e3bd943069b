"""Login attempts limited per client address, and the audit log of every change.

:class:`LoginLimiter`: after ``free`` failed logins from one address, each further
one locks it out twice as long as the one before (30 s, 1 min, 2 min, ... at most an
hour), during which its logins are answered 429 with ``Retry-After`` without even
checking the password; a login that succeeds forgets its failures.

:class:`Audit`: who (the login name and the client's address) did what, as a log
line and a JSON line appended to ``DATA_DIR/console_audit.jsonl`` (mode 0600).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("roses_app.publish.console")

FREE_FAILURES = 5
FIRST_LOCKOUT = 30.0
LONGEST_LOCKOUT = 3600.0
REMEMBERED = 10_000  # addresses with failures kept (the oldest forgotten first)


class LoginLimiter:
    """Failed logins per client address (see the module docstring)."""

    def __init__(
        self,
        free: int = FREE_FAILURES,
        first: float = FIRST_LOCKOUT,
        longest: float = LONGEST_LOCKOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.first = first
        self.longest = longest
        self.clock = clock
        self._lock = threading.Lock()
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # count, until

    def retry_after(self, address: str) -> float | None:
        """Seconds until ``address`` may try again; None: it may now."""
        with self._lock:
            found = self._failures.get(address)
        if found is None:
            return None
        wait = found[1] - self.clock()
        return wait if wait > 0 else None

    def failed(self, address: str) -> int:
        """Count a failure; the failures of ``address`` so far."""
        with self._lock:
            count, _ = self._failures.pop(address, (0, 0.0))
            count += 1
            until = 0.0
            if count >= self.free:
                wait = min(self.longest, self.first * 2 ** (count - self.free))
                until = self.clock() + wait
            self._failures[address] = (count, until)
            while len(self._failures) > REMEMBERED:
                self._failures.popitem(last=False)
        return count

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)


class Audit:
    """Appends who did what (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def record(self, user: str, address: str, action: str, **detail: Any) -> None:
        at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        entry = {"at": at, "user": user, "address": address, "action": action, **detail}
        shown = " ".join(f"{k}={v!r}" for k, v in detail.items())
        log.info("console: %s from %s: %s %s", user, address, action, shown)
        line = orjson.dumps(entry, default=str, option=orjson.OPT_APPEND_NEWLINE)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
