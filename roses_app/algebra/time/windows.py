"""Window contents and window arithmetic of the ROSES algebra (seed 002, "Fenêtrage"
and "Fenêtres").

Pure functions over a finite, time-ordered event list: the oracle that the window
operators of the reference evaluator and of the Spark compiler build on, and the one
place where a time window's refreshes and bounds are computed (both engines call it).

* Refreshes: ω_time,w,d,f,t0 is refreshed at r = t0 + k·f (k ≥ 0); the window of
  refresh r holds the events with r−d−w+1 ≤ ts ≤ r−d (:func:`refresh_bounds`).
  Between refreshes it keeps the content of the last refresh (:func:`last_refresh`);
  before t0 it is empty.  Without a period it is refreshed at every instant (ω_time,w:
  the events of the last w time units).  The seed's ω_time,2,0,4,1 table is the test
  of this reading.  :func:`bounds` is the window at a time, :func:`oldest_needed` what
  a window may still show later (an operator's memory), :func:`refreshes_holding` the
  windows an event is in (α/γ over a periodic window), :func:`bucket_layout` Spark's
  ``window()`` buckets of a periodic window.
* ``time_window``: ω_time,w,d,f,t0 at time t (the physical WindowCall).
* ``count_window``: ω_count,N at time t: the last N events, plus every earlier event
  sharing the timestamp of the first of them.
* ``window_content``: either, from a plan's window spec.
* ``window_events``: the physical Window operator: at each timestamp of the input,
  the window content at that time, re-stamped with it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from roses_app.algebra.plan.operators import (
    CountWindow,
    Node,
    SessionWindow,
    TimeWindow,
    Window,
    WindowSpec,
)
from roses_app.algebra.plan.specs import describe_window


class Timed(Protocol):
    @property
    def ts(self) -> int: ...


E = TypeVar("E", bound=Timed)


class Refreshed(Protocol):
    """The parameters of ω_time,w,d,f,t0 (a
    :class:`~roses_app.algebra.plan.operators.TimeWindow`)."""

    @property
    def width(self) -> int: ...
    @property
    def period(self) -> int | None: ...
    @property
    def start(self) -> int: ...
    @property
    def delay(self) -> int: ...


class _Time(NamedTuple):
    """:func:`time_window`'s arguments as a :class:`Refreshed`."""

    width: int
    period: int | None
    start: int
    delay: int


# -- refreshes and bounds --------------------------------------------------------------


def last_refresh(spec: Refreshed, t: int) -> int | None:
    """The refresh in force at ``t``: the last t0 + k·f ≤ t (``t`` itself without a
    period); None before the first refresh t0."""
    if spec.period is None:
        return t
    if t < spec.start:
        return None
    return spec.start + (t - spec.start) // spec.period * spec.period


def refresh_bounds(spec: Refreshed, refresh: int) -> tuple[int, int]:
    """The [low, high] range of times of the window refreshed at ``refresh``."""
    return refresh - spec.delay - spec.width + 1, refresh - spec.delay


def bounds(spec: Refreshed, t: int) -> tuple[int, int] | None:
    """The [low, high] range of times in the window at ``t`` (nothing after ``t``);
    None before the first refresh (the window is empty)."""
    refresh = last_refresh(spec, t)
    if refresh is None:
        return None
    low, high = refresh_bounds(spec, refresh)
    return low, min(high, t)


def call_bounds(spec: Refreshed | None, t: int) -> tuple[int, int] | None:
    """:func:`bounds`, and [t, t] without a window (ω0: the events of that time)."""
    return (t, t) if spec is None else bounds(spec, t)


def oldest_needed(spec: Refreshed, t: int) -> int:
    """The earliest ts that the window may show at any time ≥ ``t``."""
    # the refresh in force at t, or t0 before the first one: refreshes only grow
    refresh = last_refresh(spec, t)
    return refresh_bounds(spec, spec.start if refresh is None else refresh)[0]


def refreshes_holding(spec: Refreshed, ts: int) -> range:
    """The refreshes r = t0 + k·f (k ≥ 0) of a periodic window whose window holds an
    event at ``ts``: r − d − w + 1 ≤ ts ≤ r − d, in increasing order."""
    if spec.period is None:
        raise ValueError("a window without a period is refreshed at every instant")
    low = max(ts + spec.delay, spec.start)
    first = spec.start + -(-(low - spec.start) // spec.period) * spec.period
    return range(first, ts + spec.delay + spec.width, spec.period)


def closed_windows(
    events: Sequence[E], spec: Refreshed, until: int, since: int | None = None
) -> list[tuple[int, int, list[E]]]:
    """(start, end, items) of each window of a periodic time window that holds items of
    ``events`` (time-ordered) and has closed by ``until`` (its end < ``until``), but
    not by ``since`` (end ≥ ``since``: those were closed before), by end."""
    refreshes: set[int] = set()
    for e in events:
        refreshes.update(refreshes_holding(spec, e.ts))
    times = [e.ts for e in events]
    found: list[tuple[int, int, list[E]]] = []
    for r in sorted(refreshes):
        start, end = refresh_bounds(spec, r)
        if end >= until or (since is not None and end < since):
            continue
        content = events[bisect_left(times, start) : bisect_right(times, end)]
        if content:
            found.append((start, end, list(content)))
    return found


def open_after(spec: Refreshed, ts: int, until: int) -> bool:
    """Whether a window holding an event at ``ts`` is still open at ``until`` (so
    that event must be kept for it)."""
    refreshes = refreshes_holding(spec, ts)
    return bool(refreshes) and refresh_bounds(spec, refreshes[-1])[1] >= until


@dataclass(frozen=True)
class BucketLayout:
    """Spark ``window()`` arguments (µs) of a periodic window, and what the seed's
    window keeps of a bucket.

    The window refreshed at r is the half-open bucket [r−d−w+1, r−d+1) of
    ``window(time, w, f, startTime)``, startTime ≡ t0−d−w+1 (mod f).  Spark wants
    slide ≤ duration, so a window with holes (w < f) uses buckets of f µs that *end*
    where the seed's window ends and keeps the items of their last w µs.  Buckets
    ending before ``first_end`` (those of refreshes before t0) are not windows."""

    duration: int
    slide: int
    offset: int  # Spark's startTime, in [0, slide)
    width: int  # the seed's window: the last ``width`` µs of each bucket
    first_end: int | None = None  # exclusive end of the first window (None: no limit)


def bucket_layout(spec: TimeWindow) -> BucketLayout:
    """The buckets of a periodic time window (see :class:`BucketLayout`)."""
    if spec.period is None:
        raise ValueError(f"{describe_window(spec)} has no period: it is not bucketed")
    duration = max(spec.width, spec.period)
    first_end = refresh_bounds(spec, spec.start)[1] + 1  # the window refreshed at t0
    offset = (first_end - duration) % spec.period
    return BucketLayout(duration, spec.period, offset, spec.width, first_end)


def periodic_input(node: Node) -> tuple[Node, TimeWindow] | None:
    """(the stream below, the window) when ``node`` is a periodic time window (which
    α and γ read as one group per closed window)."""
    if isinstance(node, Window) and isinstance(node.spec, TimeWindow) and node.spec.period:
        return node.input, node.spec
    return None


# -- contents --------------------------------------------------------------------------


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
    if period is not None and period <= 0:
        raise ValueError("a time window's period must be > 0")
    found = bounds(_Time(width, period, start, delay), t)
    if found is None:
        return []
    low, high = found
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


def session_window(events: Sequence[E], t: int, gap: int) -> list[E]:
    """The session window at time ``t`` (events in time order): the session of the
    last event up to ``t``, the events before it each less than ``gap`` from the next,
    while it is open (``t`` less than ``gap`` after its last event; then it has closed,
    as an aggregate's session closes, :func:`roses_app.algebra.time.panes.closes_at`)."""
    if gap <= 0:
        raise ValueError("a session window needs a gap > 0")
    end = bisect_right([e.ts for e in events], t)
    if end == 0 or t - events[end - 1].ts >= gap:
        return []
    first = end - 1
    while first > 0 and events[first].ts - events[first - 1].ts < gap:
        first -= 1
    return list(events[first:end])


def window_content(events: Sequence[E], spec: WindowSpec, t: int) -> list[E]:
    """ω(events) at time ``t`` for a plan's window spec."""
    if isinstance(spec, CountWindow):
        return count_window(events, t, spec.size)
    if isinstance(spec, SessionWindow):
        return session_window(events, t, spec.gap)
    return time_window(
        events, t, spec.width, period=spec.period, start=spec.start, delay=spec.delay
    )


def window_events(
    events: Sequence[E], content: Callable[[Sequence[E], int], list[E]]
) -> list[tuple[int, E]]:
    """Window(f): at each input timestamp t, every event of the window at t, as (t, e)."""
    out: list[tuple[int, E]] = []
    for t in sorted({e.ts for e in events}):
        out.extend((t, e) for e in content(events, t))
    return out
