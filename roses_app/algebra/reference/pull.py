"""Pull queries: a stream's content at a given time (seed 003's lazy tasks and
materialized views; seed 002's WindowCall).

The content of a stream at time ``t`` is computed on demand from what had arrived by
then (the input events with an ingest time ≤ ``t``), by the reference evaluator, so
that asking never disturbs the running queries:

* a stream whose plan is a window: the window's content at ``t``, ω(f, t) (the
  WindowCall of the physical algebra);
* any other stream: its events up to ``t`` (its time ≤ ``t``), newest first, per
  part (a split stream has one per value): the materialized view of the stream as it
  stood at ``t``.

A time window of filters, maps and unions needs only the events of its range
(:func:`earliest_needed`): asking for "now" reads the spool's last day for a daily
window, not its whole history.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from roses_app.algebra.plan.operators import Stream, TimeWindow, Window
from roses_app.algebra.reference.evaluator import evaluate, evaluate_stream
from roses_app.algebra.reference.registry import Namespaces, RefEvent, RefInput
from roses_app.algebra.reference.time_operators import WindowCall
from roses_app.algebra.time.eventtime import event_timed, stateless
from roses_app.algebra.time.windows import call_bounds
from roses_app.errors import RosesError


class PullQueryError(RosesError, ValueError):
    """A pull query that cannot be answered (the message says why)."""


class UnknownStreamError(PullQueryError, LookupError):
    """A pull query for a stream the config does not have."""


def content_at(
    stream: Stream,
    inputs: Sequence[RefInput],
    at: int,
    namespaces: Namespaces = (),
    *,
    lateness: int = 0,
    show: Callable[[int], str] = str,
) -> dict[str, list[RefEvent]]:
    """The content of ``stream`` at time ``at`` per part ('' for an unsplit stream),
    newest first; ``inputs`` in arrival order (the spool's); ``show`` writes a time
    in messages."""
    if inputs and at < inputs[0].ts:
        raise PullQueryError(
            f"{show(at)} is before the spool's first event ({show(inputs[0].ts)}): the "
            "spool keeps the items from then on; ask for a later time"
        )
    arrived = [e for e in inputs if e.ts <= at]
    plan = stream.plan
    if isinstance(plan, Window):
        below = evaluate(plan.input, arrived, namespaces, lateness=lateness)
        return {"": _newest_first(WindowCall(below, plan.spec).at(at))}
    parts = evaluate_stream(stream, arrived, namespaces, lateness=lateness)
    return {part: _newest_first(e for e in events if e.ts <= at) for part, events in parts.items()}


def earliest_needed(stream: Stream, at: int, max_future: int) -> int | None:
    """The earliest ingest time of an event that can be in ``stream``'s content at
    ``at`` (None: any, the whole spool up to ``at`` counts).  A time window of a
    stateless plan shows the items whose time is in its range at ``at``; an item's
    publication time is at most ``max_future`` after its ingest time (a later one is
    not believed), so over publication time the events ingested that much earlier
    count too."""
    plan = stream.plan
    if not isinstance(plan, Window) or not isinstance(plan.spec, TimeWindow):
        return None
    if not stateless(plan.input):
        return None
    found = call_bounds(plan.spec, at)
    low = at if found is None else found[0]
    return low - max_future if event_timed(plan.input) else low


def _newest_first(events: Iterable[RefEvent]) -> list[RefEvent]:
    return sorted(events, reverse=True)


__all__ = ["PullQueryError", "UnknownStreamError", "content_at", "earliest_needed"]
