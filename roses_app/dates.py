"""Which publication dates are believed: one rule for the spool and ``roses replay``.

A publication date far in the future or before 1990 is a broken clock or a
placeholder, not a time: the item keeps its ingest time (see
:mod:`roses_app.algebra.time.eventtime`).  No dependency: configuration, spool and replay
all read this module.
"""

from __future__ import annotations

MICROS = 1_000_000
EARLIEST_PUBLISHED = 631_152_000 * MICROS  # 1990-01-01T00:00:00Z, µs since the epoch
DEFAULT_MAX_FUTURE = 86_400 * MICROS  # one day (settings.max_future)


def plausible_published(
    published: int | None, ingest: int, max_future: int = DEFAULT_MAX_FUTURE
) -> int | None:
    """``published`` (µs since the epoch) when it can be an item's publication time at
    ingest time ``ingest``; None when it is missing, before 1990 or more than
    ``max_future`` µs after ``ingest``."""
    if published is None or published < EARLIEST_PUBLISHED or published > ingest + max_future:
        return None
    return published
