"""Starting the stateless query on a fresh checkpoint once Spark's file-source log
has grown.

Spark's file source records every file it has read in the query's checkpoint
(``sources/0``) and every 10 batches rewrites that log as one compact file holding
every entry ever: the files themselves are archived, but their log is never pruned
(a retention option was proposed for Spark and not merged).  Left alone, a daemon
that runs for months rewrites and, at each start, reads a log of every spool file
it ever wrote.

The stateless query holds no operator state, so it can go on from a new checkpoint:

1. the files Spark has read but not yet archived are moved to the archive, exactly
   as its ``cleanSource: archive`` would, so the new checkpoint reads only the files
   no batch has read;
2. ``roses-epoch.next`` is written: the commit point of the rebase;
3. the checkpoint's contents go, and the store forgets the query's batch ids (Spark
   numbers them from 0 again; the query's spool position stays);
4. ``roses-epoch.next`` becomes ``roses-epoch``.

A crash after step 2 is finished by :func:`finish_rebase` at the next start.  The
epoch is part of the frontier files' names, so the stateful queries' file sources
(which skip a path they have seen) read the new batch 0 as a new file.

Only a checkpoint whose last planned batch is committed is rebased: a batch planned
and not committed must run again from the same checkpoint, with the same files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlparse

from roses_app.spark.layout import STATELESS_QUERY
from roses_app.spool import archive_of

if TYPE_CHECKING:
    from roses_app.spark.queries import RunningQuery

log = logging.getLogger(__name__)

# Bytes of the source log (its latest compact file and the deltas after it) past
# which the stateless query starts on a fresh checkpoint: about 10,000 files.
REBASE_LOG_BYTES = 2 * 1024 * 1024
EPOCH_FILE = "roses-epoch"
PENDING_FILE = "roses-epoch.next"


def read_epoch(checkpoint: Path) -> int:
    """How many times this query's checkpoint was started afresh (0: never)."""
    try:
        return int((checkpoint / EPOCH_FILE).read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def _batches(folder: Path) -> dict[int, Path]:
    """A Spark metadata log folder: batch id -> file (``N`` or ``N.compact``)."""
    found: dict[int, Path] = {}
    if folder.is_dir():
        for path in folder.iterdir():
            stem = path.name.removesuffix(".compact")
            if stem.isdigit():
                found[int(stem)] = path
    return found


def _live_log(checkpoint: Path) -> list[Path]:
    """The source log files Spark reads at start: the latest compact file and the
    deltas after it."""
    batches = _batches(checkpoint / "sources" / "0")
    compacts = [n for n, p in batches.items() if p.name.endswith(".compact")]
    start = max(compacts, default=-1)
    return [batches[n] for n in sorted(batches) if n >= start]


def log_bytes(checkpoint: Path) -> int:
    """The size of the source log Spark reads and rewrites."""
    return sum(path.stat().st_size for path in _live_log(checkpoint))


def processed_files(checkpoint: Path) -> set[Path]:
    """Every file the query's file source has read (planned into a batch)."""
    files: set[Path] = set()
    for path in _live_log(checkpoint):
        lines = path.read_text(encoding="utf-8").splitlines()
        for line in lines[1:]:  # the first line is the log format's version
            if line.strip():
                uri = urlparse(json.loads(line)["path"])
                files.add(Path(unquote(uri.path)))
    return files


def all_committed(checkpoint: Path) -> bool:
    """True when the latest batch planned (offsets) has committed (commits)."""
    planned = _batches(checkpoint / "offsets")
    committed = _batches(checkpoint / "commits")
    return max(planned, default=-1) == max(committed, default=-1)


def rebase_due(checkpoint: Path, limit: int | None = None) -> bool:
    """The source log is past ``limit`` bytes (default ``REBASE_LOG_BYTES``)."""
    if limit is None:
        limit = REBASE_LOG_BYTES
    return log_bytes(checkpoint) > limit and all_committed(checkpoint)


def rebase(
    checkpoint: Path, log_dir: Path, archive: Path, forget_batches: Callable[[], None]
) -> bool:
    """Start the query's checkpoint afresh (see the module's text); False (nothing
    done) if its last batch has not committed."""
    if not all_committed(checkpoint):
        return False
    folder = log_dir.resolve()  # Spark's paths are as it was given them, unresolved
    pending = sorted(p for p in processed_files(checkpoint) if p.parent.resolve() == folder)
    for path in pending:
        # where Spark's cleanSource would put it: the full path below the archive
        target = archive / path.relative_to(path.anchor)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except FileNotFoundError:
            continue  # Spark archived it meanwhile
    epoch = read_epoch(checkpoint) + 1
    _write_durably(checkpoint / PENDING_FILE, str(epoch))
    finish_rebase(checkpoint, forget_batches)
    log.info(
        "stateless query: its file-source log had grown; started a fresh checkpoint "
        "(epoch %d, %d read file(s) archived)",
        epoch,
        len(pending),
    )
    return True


def finish_rebase(checkpoint: Path, forget_batches: Callable[[], None]) -> None:
    """Steps 3 and 4 of a rebase whose commit point is written (again after a crash:
    each step can be done twice)."""
    pending = checkpoint / PENDING_FILE
    if not pending.exists():
        return
    for child in checkpoint.iterdir():
        if child.name in (EPOCH_FILE, PENDING_FILE):
            continue
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()
    forget_batches()
    os.replace(pending, checkpoint / EPOCH_FILE)


class Forgets(Protocol):
    def forget_query(self, query_id: str, *, keep_position: bool = False) -> None: ...


def rebase_stateless(checkpoints: Path, log_dir: Path, sink: Forgets) -> bool:
    """:func:`rebase` the stateless query's checkpoint; the query must not be running."""
    return rebase(
        checkpoints / STATELESS_QUERY,
        log_dir,
        archive_of(log_dir),
        lambda: sink.forget_query(STATELESS_QUERY, keep_position=True),
    )


def rebase_running(
    checkpoints: Path, log_dir: Path, sink: Forgets, queries: Sequence[RunningQuery]
) -> bool:
    """While the daemon runs: when the stateless query's file-source log has grown,
    stop it after its batch in flight, start its checkpoint afresh and start it
    again (the stateful queries go on meanwhile)."""
    from roses_app.spark.queries import stop_gracefully

    running = next((q for q in queries if q.name == STATELESS_QUERY), None)
    if running is None or not rebase_due(checkpoints / STATELESS_QUERY):
        return False
    stop_gracefully([running])
    try:
        return rebase_stateless(checkpoints, log_dir, sink)
    finally:
        running.query = running.restart()


def _write_durably(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


__all__ = [
    "EPOCH_FILE",
    "REBASE_LOG_BYTES",
    "all_committed",
    "finish_rebase",
    "log_bytes",
    "processed_files",
    "read_epoch",
    "rebase",
    "rebase_due",
    "rebase_running",
    "rebase_stateless",
]
