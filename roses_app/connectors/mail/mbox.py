"""Reading new messages of an mbox file, read-only.

Messages start at lines beginning with ``From `` (the mboxo/mboxrd separator line,
which is not part of the message); the blank line before a separator belongs to the
separator.  Lines quoted as ``>From `` stay as written, like Python's
:mod:`mailbox` does.

The read position is remembered as the byte offset after the last message handed
over, with a hash of the bytes just before it.  When the file only grew, reading
starts there; when it shrank or was rewritten (the hash differs: a mail client
expunged or edited messages), it is read again from the start and the caller's seen
keys (item hashes) drop what was handed over before.  A last message without its
final newline is left for a later poll while the file changed in the last
``SETTLE`` seconds (it may still be being written).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from roses_app.connectors.mail.maildir import NotAMailboxError

Deliver = Callable[..., Any]  # deliver(list[(None, raw bytes)], mbox_offset=, mbox_tail=)
TAIL = 4096  # bytes hashed before the read position
SETTLE = 2.0  # seconds


def tail_hash(f: BinaryIO, offset: int) -> str:
    """Hash of the ``TAIL`` bytes before ``offset`` (and of the offset itself)."""
    start = max(0, offset - TAIL)
    f.seek(start)
    data = f.read(offset - start)
    return hashlib.sha256(str(offset).encode() + b"\0" + data).hexdigest()


def read_mbox(path: Path, offset: int, tail: str, deliver: Deliver, batch_size: int = 100) -> int:
    """Hand the messages of the mbox at ``path`` after the read position (``offset``,
    ``tail``) to ``deliver`` in batches, with the new position; return how many."""
    if not path.is_file():
        raise NotAMailboxError(f"{path} does not exist or is not a file")
    with path.open("rb") as f:
        stat = path.stat()
        size = stat.st_size
        settled = time.time() - stat.st_mtime >= SETTLE
        start = 0
        if 0 < offset <= size and tail_hash(f, offset) == tail:
            f.seek(offset)
            if offset == size or f.read(5) == b"From ":
                start = offset
        if start == size:
            return 0
        f.seek(start)
        first = f.read(5)
        if first and first != b"From ":
            if start:  # not at a separator any more: read everything again
                start = 0
                f.seek(0)
                first = f.read(5)
            if first and first != b"From ":
                raise NotAMailboxError(
                    f"{path} is not an mbox file (it does not start with a 'From ' line)"
                )
        f.seek(start)
        return _read_from(f, start, size, deliver, batch_size, settled)


def _read_from(
    f: BinaryIO, start: int, size: int, deliver: Deliver, batch_size: int, settled: bool
) -> int:
    batch: list[tuple[None, bytes]] = []
    n_read = 0
    position = start
    current: list[bytes] | None = None
    end_of_last = start  # offset just after the last complete message handed over

    def flush(end: int) -> None:
        nonlocal batch
        f_position = f.tell()
        deliver(batch, mbox_offset=end, mbox_tail=tail_hash(f, end))
        f.seek(f_position)
        batch = []

    while position < size:
        line = f.readline(size - position)
        if not line:
            break
        if line.startswith(b"From ") and (current is None or _after_blank(current)):
            if current is not None:
                batch.append((None, _message(current)))
                n_read += 1
                end_of_last = position
                if len(batch) >= batch_size:
                    flush(end_of_last)
            current = []
        elif current is not None:
            current.append(line)
        position += len(line)
    complete = settled or not current or current[-1].endswith(b"\n")
    if current is not None and position == size and complete:
        batch.append((None, _message(current)))
        n_read += 1
        end_of_last = position
    if batch:
        flush(end_of_last)
    return n_read


def _after_blank(lines: list[bytes]) -> bool:
    """A ``From `` line separates messages only after a blank line (or at the start)."""
    return not lines or lines[-1] in (b"\n", b"\r\n")


def _message(lines: list[bytes]) -> bytes:
    if lines and lines[-1] in (b"\n", b"\r\n"):
        lines = lines[:-1]  # the blank line before the next separator
    return b"".join(lines)
