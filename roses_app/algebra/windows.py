"""Window contents of the ROSES algebra (seed 002, "Fenêtrage" and "Fenêtres").

Pure functions over a finite, time-ordered event list: the oracle that the window
operators of the reference evaluator and of the Spark compiler build on.

* ``time_window``: ω_time,w,d,f,t0 at time t (the physical WindowCall).  The window
  is refreshed at t0 + k·f; between refreshes it keeps the content of the last
  refresh r, the events with r−d−w+1 ≤ ts ≤ r−d.  Without a period it is refreshed
  at every instant (ω_time,w: the events of the last w time units).  The seed's
  ω_time,2,0,4,1 table is the test of this reading.
* ``count_window``: ω_count,N at time t: the last N events, plus every earlier event
  sharing the timestamp of the first of them.
* ``window_events``: the physical Window operator: at each timestamp of the input,
  the window content at that time, re-stamped with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class Timed(Protocol):
    @property
    def ts(self) -> int: ...


E = TypeVar("E", bound=Timed)


def time_window(
    events: Sequence[E],
    t: int,
    width: int,
    *,
    period: int | None = None,
    start: int = 0,
    delay: int = 0,
) -> list[E]:
    """ω_time,w,d,f,t0(events) at time ``t``, in the events' order."""
    if width <= 0:
        raise ValueError("a time window needs a width > 0")
    if period is None:
        refresh = t
    else:
        if period <= 0:
            raise ValueError("a time window's period must be > 0")
        if t < start:
            return []
        refresh = start + (t - start) // period * period
    low, high = refresh - delay - width + 1, min(refresh - delay, t)
    return [e for e in events if low <= e.ts <= high]


def count_window(events: Sequence[E], t: int, n: int) -> list[E]:
    """ω_count,N(events) at time ``t``: the last N, widened to a whole first timestamp."""
    if n <= 0:
        raise ValueError("a count window needs N > 0")
    past = [e for e in events if e.ts <= t]
    if len(past) <= n:
        return past
    first_ts = past[len(past) - n].ts
    first = next(i for i, e in enumerate(past) if e.ts == first_ts)
    return past[first:]


def window_events(
    events: Sequence[E], content: Callable[[Sequence[E], int], list[E]]
) -> list[tuple[int, E]]:
    """Window(f): at each input timestamp t, every event of the window at t, as (t, e)."""
    out: list[tuple[int, E]] = []
    for t in sorted({e.ts for e in events}):
        out.extend((t, e) for e in content(events, t))
    return out
