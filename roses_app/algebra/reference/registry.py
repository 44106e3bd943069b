"""The reference evaluator's dispatcher and what every handler shares.

Handler modules (:mod:`~roses_app.algebra.reference.stateless`,
:mod:`~roses_app.algebra.reference.time_operators`) register on :func:`register`;
:mod:`roses_app.algebra.reference.evaluator` imports them all, so importing it gives the
complete registry.  Nothing here imports a handler module: no import cycle.

Time-dependent results (closed windows, outer-join and diff rows) only count once
they are decided: before the *horizon*, the latest input time (heartbeats included)
minus the allowed lateness, like Spark's watermark.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import singledispatch
from typing import NamedTuple

from roses_app.algebra.plan.operators import Node

Namespaces = tuple[tuple[str, str], ...]


class RefEvent(NamedTuple):
    """One event of a stream, ordered by (ts, seq, item); ``item`` None is a heartbeat
    (λ: time passed, nothing arrived), which the stateless operators pass on.  A named
    tuple: a replay makes one per output event, and a frozen dataclass cost twice as
    much to build."""

    ts: int
    seq: int
    item: str | None

    # the order of event_order, not the tuple's (a heartbeat's None sorts as "")
    def __lt__(self, other: object) -> bool:
        return event_order(self) < event_order(other)  # type: ignore[arg-type]

    def __le__(self, other: object) -> bool:
        return event_order(self) <= event_order(other)  # type: ignore[arg-type]

    def __gt__(self, other: object) -> bool:
        return event_order(self) > event_order(other)  # type: ignore[arg-type]

    def __ge__(self, other: object) -> bool:
        return event_order(self) >= event_order(other)  # type: ignore[arg-type]


def event_order(event: RefEvent) -> tuple[int, int, str]:
    """The order of events (a sort key: far cheaper than ``__lt__`` per comparison)."""
    return (event.ts, event.seq, event.item or "")


@dataclass(frozen=True)
class RefInput:
    """An input event; ``item`` None is a heartbeat: it only says that time passed.
    ``ts`` is the ingest time (the arrival order), ``published`` the item's
    publication time when it has a plausible one (its time for a source read with
    ``time: published``)."""

    source: str
    ts: int
    seq: int
    item: str | None
    published: int | None = None


@dataclass
class Context:
    """One evaluation: the input, the namespaces, the horizon and the memo of shared
    sub-plans (equal nodes are evaluated once: common sub-plans are computed once)."""

    inputs: Sequence[RefInput]
    ns: Namespaces = ()
    horizon: int = 0
    memo: dict[Node, list[RefEvent]] = field(default_factory=dict)
    # how late an item read in publication time may come (settings.lateness), for the
    # operators that take no lateness of their own (roses_app.algebra.time.release)
    lateness: int = 0
    # windows over publication time: the items too late for them, per node, and how
    # many results computed again had not changed (not published again)
    late: dict[Node, list[RefEvent]] = field(default_factory=dict)
    unchanged: dict[Node, int] = field(default_factory=dict)
    # each join and grouping over publication time: its last clock and its heartbeats
    # on time (what a released run over its results knows is decided, and sees pass)
    settled: dict[Node, tuple[int | None, list[RefEvent]]] = field(default_factory=dict)
    _arrivals: dict[int, int] = field(default_factory=dict)

    def arrival(self, seq: int) -> int:
        """The ingest time of the input event ``seq`` (an output event keeps the seq
        of the input event it comes from)."""
        if not self._arrivals:
            self._arrivals.update((e.seq, e.ts) for e in self.inputs)
        return self._arrivals[seq]


def horizon_of(inputs: Sequence[RefInput], lateness: int = 0) -> int:
    """The time before which results are decided: the latest input time − lateness,
    each in whole milliseconds (rounded down), as Spark's watermark counts them."""
    latest = max((e.ts for e in inputs), default=0)
    return 1000 * (latest // 1000 - lateness // 1000)


def ordered(events: Iterable[RefEvent]) -> list[RefEvent]:
    """The events in event_order.  As plain tuples they compare in C, with no Python
    call per event (a replay at 10,000 subscriptions sorts 920,000 of them); a
    heartbeat's None is compared only when two events tie on ts and seq, and then
    raises TypeError, and event_order decides instead.  Where no comparison raises,
    both orders agree on every pair compared, so the result is the same."""
    events = list(events)
    try:
        return sorted(events, key=tuple)
    except TypeError:
        return sorted(events, key=event_order)


def items_only(events: Iterable[RefEvent]) -> list[RefEvent]:
    """The events that carry an item (no heartbeats)."""
    return [e for e in events if e.item is not None]


def heartbeats(events: Sequence[RefEvent]) -> list[RefEvent]:
    """The heartbeats of ``events``."""
    return [e for e in events if e.item is None]


def run(node: Node, ctx: Context) -> list[RefEvent]:
    """The output events of ``node`` (memoized: a shared sub-plan is computed once)."""
    found = ctx.memo.get(node)
    if found is None:
        found = ordered(_evaluate(node, ctx))
        ctx.memo[node] = found
    return found


@singledispatch
def _evaluate(node: Node, ctx: Context) -> list[RefEvent]:
    raise NotImplementedError(f"no reference semantics for {type(node).__name__}")


register = _evaluate.register


def has_semantics(node_type: type) -> bool:
    """Whether a handler is registered for ``node_type``."""
    return _evaluate.dispatch(node_type) is not _evaluate.dispatch(object)
