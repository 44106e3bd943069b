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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from roses_app.algebra.plan import Stream, Window
from roses_app.algebra.reference import evaluate, evaluate_stream
from roses_app.algebra.reference_registry import Namespaces, RefEvent, RefInput
from roses_app.algebra.reference_time import WindowCall
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


def _newest_first(events: Iterable[RefEvent]) -> list[RefEvent]:
    return sorted(events, reverse=True)


__all__ = ["PullQueryError", "UnknownStreamError", "content_at"]
