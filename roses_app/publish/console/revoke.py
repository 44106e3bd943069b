"""Console sessions ended before they expire, kept with the daemon's state.

A session cookie is signed, so the server keeps no list of the sessions it gave; to
end one early it keeps the few it must refuse instead, in
``DATA_DIR/console_sessions.json`` (mode 0600)::

    {"generation": 3, "password": "<tag>", "ended": {"<session id>": <until, epoch s>}}

* **Log out** adds the session's id to ``ended`` until the cookie would have expired
  anyway (then it is forgotten): a copy of the cookie replayed is refused.
* **Log out everywhere** adds one to ``generation``: a cookie carries the generation
  it was made in, and one older than the file's is refused.  The console's button does
  it, and so does ``roses console-password -c feeds.yaml`` (a new password should end
  the sessions of the old one); a password hash the file has not seen yet does it too.

The file is read again when it changes on disk (a ``stat`` per request), so that the
command line's bump reaches a running daemon at once; every change is made under an
exclusive lock, read-modify-write, and written whole (fsync, rename).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from roses_app.errors import RosesError

FILE = "console_sessions.json"
MAX_ENDED = 100_000  # ids kept at most (the soonest to expire are forgotten first)


class RevocationError(RosesError, OSError):
    """The list of ended sessions cannot be read or written."""


@dataclass
class _State:
    generation: int = 0
    password: str = ""
    ended: dict[str, float] = field(default_factory=dict)


class Revocations:
    """The generation and the sessions ended early (see the module docstring)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None  # (inode, mtime_ns, size) read
        self._state = _State()

    @classmethod
    def of(cls, data_dir: Path) -> Revocations:
        return cls(data_dir / FILE)

    # -- reading -----------------------------------------------------------------------

    def generation(self) -> int:
        return self._current().generation

    def is_ended(self, session_id: str) -> bool:
        return session_id in self._current().ended

    def _current(self) -> _State:
        """The state as on disk now (read again only when the file changed)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return _State()
        except OSError as exc:
            raise RevocationError(f"cannot read {self.path}: {exc.strerror}") from exc
        signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if signature != self._seen:
                self._state = self._read()
                self._seen = signature
            return self._state

    def _read(self) -> _State:
        try:
            data: Any = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return _State()
        except OSError as exc:
            raise RevocationError(f"cannot read {self.path}: {exc.strerror}") from exc
        except orjson.JSONDecodeError as exc:
            # refusing every session is the safe answer to a damaged file
            raise RevocationError(
                f"{self.path} is damaged ({exc}): delete it to forget which sessions "
                "were ended (log out everywhere afterwards)"
            ) from exc
        ended = data.get("ended", {}) if isinstance(data, dict) else {}
        return _State(
            generation=int(data.get("generation", 0)) if isinstance(data, dict) else 0,
            password=str(data.get("password", "")) if isinstance(data, dict) else "",
            ended={str(k): float(v) for k, v in ended.items()},
        )

    # -- changing ----------------------------------------------------------------------

    def end(self, session_id: str, until: float) -> None:
        """Refuse the session ``session_id`` from now on (until ``until``, when its
        cookie expires by itself)."""
        with self._change() as state:
            state.ended[session_id] = until
            if len(state.ended) > MAX_ENDED:
                kept = sorted(state.ended.items(), key=lambda kv: kv[1])[-MAX_ENDED:]
                state.ended = dict(kept)

    def end_all(self) -> int:
        """Refuse every session made so far; the new generation."""
        with self._change() as state:
            state.generation += 1
            state.ended.clear()  # (all older than the new generation anyway)
            return state.generation

    def password_seen(self, tag: str) -> int:
        """Note the current password's tag; a tag other than the one noted before (a
        new password) ends every session.  The generation."""
        state = self._current()
        if state.password == tag:
            return state.generation
        with self._change() as state:
            if state.password != tag:
                if state.password:
                    state.generation += 1
                    state.ended.clear()
                state.password = tag
            return state.generation

    @contextmanager
    def _change(self) -> Iterator[_State]:
        """The state, read under the lock file's exclusive lock (another process, the
        command line, may change it too) and written back whole."""
        lock_path = self.path.with_suffix(".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise RevocationError(f"cannot open {lock_path}: {exc.strerror}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._read()
            now = self.clock()
            state.ended = {k: v for k, v in state.ended.items() if v > now}
            yield state
            self._write(state)
        finally:
            os.close(fd)  # (releases the lock)

    def _write(self, state: _State) -> None:
        data = {"generation": state.generation, "password": state.password, "ended": state.ended}
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(orjson.dumps(data))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(temporary, self.path)
        except OSError as exc:
            raise RevocationError(f"cannot write {self.path}: {exc.strerror}") from exc
        with self._lock:
            self._seen = None  # read again at the next look (the rename made a new file)
