"""Reading new messages of a Maildir, read-only.

The messages are the files of ``new/`` and ``cur/`` (``tmp/`` holds deliveries in
progress).  A message is known by its *key*, the file name before the ``:`` that
starts its flags (``1700000000.M1P2.host:2,S`` is ``1700000000.M1P2.host``), since a
mail client renames a file when it moves it from ``new/`` to ``cur/`` or changes its
flags.  Messages are handed over oldest first (Maildir names start with the delivery
time).  Nothing is ever renamed, flagged or deleted here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Container
from pathlib import Path
from typing import Any

from roses_app.errors import RosesError

log = logging.getLogger(__name__)

Deliver = Callable[..., Any]  # deliver(list[(key, raw bytes)], **position)


class NotAMailboxError(RosesError, OSError):
    """The configured path is not a mailbox of the configured kind."""


def maildir_key(file_name: str) -> str:
    """The seen key of a Maildir file: ``f:`` + its name without flags."""
    return "f:" + file_name.split(":", 1)[0]


def read_maildir(path: Path, seen: Container[str], deliver: Deliver, batch_size: int = 100) -> int:
    """Hand every message of the Maildir at ``path`` whose key is not in ``seen`` to
    ``deliver``, in batches; return how many were read."""
    if not path.is_dir():
        raise NotAMailboxError(f"{path} does not exist or is not a folder")
    if not (path / "new").is_dir() and not (path / "cur").is_dir():
        raise NotAMailboxError(f"{path} is not a Maildir (it has no new/ and cur/ folders)")
    found: dict[str, tuple[str, str]] = {}
    for sub in ("new", "cur"):
        try:
            with os.scandir(path / sub) as entries:
                for entry in entries:
                    if entry.name.startswith(".") or not entry.is_file():
                        continue
                    key = maildir_key(entry.name)
                    if key not in seen:
                        found.setdefault(key, (sub, entry.name))
        except FileNotFoundError:
            continue
    n_read = 0
    batch: list[tuple[str, bytes]] = []
    for key, (sub, name) in sorted(found.items(), key=lambda kv: kv[1][1]):
        raw = _read(path, sub, name)
        if raw is None:
            continue  # renamed meanwhile by a mail client: found by its key next time
        batch.append((key, raw))
        n_read += 1
        if len(batch) >= batch_size:
            deliver(batch)
            batch = []
    if batch:
        deliver(batch)
    return n_read


def _read(path: Path, sub: str, name: str) -> bytes | None:
    try:
        return (path / sub / name).read_bytes()
    except FileNotFoundError:
        other = "cur" if sub == "new" else "new"
        key = name.split(":", 1)[0]
        try:
            with os.scandir(path / other) as entries:
                for entry in entries:
                    if entry.name.split(":", 1)[0] == key:
                        return Path(entry.path).read_bytes()
        except FileNotFoundError:
            pass
        log.debug("%s: message %s vanished while reading", path, name)
        return None
