"""When the daemon must tell the queries that time has passed (heartbeats).

A heartbeat is an event without an item: it moves the watermark, so windows close and
results waiting for their time to be decided come out on a quiet day too.  Each one
costs a micro-batch in every query, so they are written only while time can still
change a result:

* **Horizon.**  After the last item at T, nothing changes with time alone once T plus
  the plan's horizon has passed: a time window ω_time,w,d,f holds an event for at most
  w + d + f (its last refresh included), windows below windows add up, and the other
  operators decide their results at their input's times (count windows, delta, joins
  of WindowCalls...).  So heartbeats stop at T + horizon + lateness, until the next
  item.
* **Interval.**  In between, one every tenth of the finest time window (its period, or
  its width without one), at least every ``MIN_INTERVAL`` and at most every
  ``MAX_INTERVAL``: an hourly digest needs one every six minutes, not every 30 s.
* **Refreshes.**  A periodic window closes at its refresh instants t0 + k·f: a
  heartbeat is due just after each one (plus the lateness), so a digest comes out
  when its hour ends, not up to an interval later.

Times are µs, as in the spool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from roses_app.algebra.plan.operators import (
    Node,
    SessionWindow,
    Stream,
    TimeWindow,
    Window,
    WindowSpec,
)
from roses_app.algebra.planner.globalplan import is_stateless

MICROS = 1_000_000
MIN_INTERVAL = 30 * MICROS
MAX_INTERVAL = 600 * MICROS
# a refresh closes a window once the watermark has passed it: the heartbeat is
# stamped this long after it (Spark's watermark is in whole milliseconds)
AFTER_REFRESH = MICROS


@dataclass(frozen=True)
class HeartbeatPlan:
    """What the streams of a config need from heartbeats."""

    interval: int  # between two heartbeats while time matters
    horizon: int  # after the last item, time stops mattering after this long
    refreshes: tuple[TimeWindow, ...]  # the periodic windows (their refresh instants)

    def next_due(self, last_item: int | None, last_event: int, lateness: int = 0) -> int | None:
        """When the next heartbeat is due, given the times of the last item and of the
        last event (item or heartbeat) in the spool; None while none is needed."""
        if last_item is None:
            return None
        stop = last_item + self.horizon + lateness + self.interval
        due = last_event + self.interval
        for spec in self.refreshes:
            due = min(due, next_refresh(spec, last_event - lateness) + lateness + AFTER_REFRESH)
        return due if due <= stop else None


def next_refresh(spec: TimeWindow, after: int) -> int:
    """The first refresh instant t0 + k·f (k ≥ 0) strictly after ``after``."""
    assert spec.period is not None
    if after < spec.start:
        return spec.start
    return spec.start + ((after - spec.start) // spec.period + 1) * spec.period


def heartbeat_plan(streams: Iterable[Stream]) -> HeartbeatPlan | None:
    """The heartbeats ``streams`` need; None when every stream is stateless (time alone
    never changes their output)."""
    roots = [s.plan for s in streams if not is_stateless(s.plan)]
    if not roots:
        return None
    memo: dict[int, int] = {}
    horizon = max(_horizon(root, memo) for root in roots)
    windows = _time_windows(roots)
    grains = [w.period if w.period is not None else w.width for w in windows]
    grains += [s.gap for s in _sessions(roots)]  # a session closes a gap after its last item
    interval = MIN_INTERVAL
    if grains:
        interval = min(MAX_INTERVAL, max(MIN_INTERVAL, min(grains) // 10))
    periodic = tuple(dict.fromkeys(w for w in windows if w.period is not None))
    return HeartbeatPlan(interval, horizon, periodic)


def _horizon(node: Node, memo: dict[int, int]) -> int:
    """How long after an event time alone may still change ``node``'s output (each
    shared node visited once)."""
    found = memo.get(id(node))
    if found is not None:
        return found
    below = max((_horizon(child, memo) for child in node.children()), default=0)
    own = 0
    if isinstance(node, Window) and isinstance(node.spec, TimeWindow):
        spec = node.spec
        own = spec.width + spec.delay + (spec.period or 0)
    elif isinstance(node, Window) and isinstance(node.spec, SessionWindow):
        own = node.spec.gap
    memo[id(node)] = below + own
    return below + own


def _time_windows(roots: list[Node]) -> list[TimeWindow]:
    return [s for s in _specs(roots) if isinstance(s, TimeWindow)]


def _sessions(roots: list[Node]) -> list[SessionWindow]:
    return [s for s in _specs(roots) if isinstance(s, SessionWindow)]


def _specs(roots: list[Node]) -> list[WindowSpec]:
    seen: set[int] = set()
    out: list[WindowSpec] = []
    todo = list(roots)
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Window):
            out.append(node.spec)
        todo.extend(node.children())
    return out
