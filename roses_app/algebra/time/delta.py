"""δ⁺ and δ⁻ over successive input times: the one loop that the reference evaluator
(:mod:`roses_app.algebra.reference.time_operators`) and Spark's Delta operator
(:mod:`roses_app.spark.sequential`) both run.

δ⁺ (``insert``): at each input time, the items not there at the previous input time;
δ⁻ (``delete``): the items of the previous input time that are gone, stamped now with
their old seq.  "Previous" is the previous timestamp present in the input (heartbeats
included), not the previous tick.  Pure Python, generic over the engine's event type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import groupby
from typing import Protocol, TypeVar


class Carrier(Protocol):
    @property
    def item(self) -> str | None: ...


class Stamped(Protocol):
    @property
    def ts(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def item(self) -> str | None: ...


C = TypeVar("C", bound=Carrier)
S = TypeVar("S", bound=Stamped)


def present(events: Iterable[C]) -> dict[str, C]:
    """The items of one time, each with its first event (heartbeats have none)."""
    found: dict[str, C] = {}
    for e in events:
        if e.item is not None:
            found.setdefault(e.item, e)
    return found


def delta(
    kind: str,
    events: Iterable[S],
    previous: dict[str, S],
    stamp: Callable[[int, int, str], S],
) -> tuple[list[S], dict[str, S]]:
    """δ⁺ (``kind`` "insert") or δ⁻ (else) of ``events`` (sorted by ts, heartbeats
    included), after a time whose items were ``previous`` (:func:`present`; empty at
    the start): the output events (but heartbeats), and the items of the last time.
    ``stamp(ts, seq, item)`` makes a δ⁻ event."""
    out: list[S] = []
    for t, group in groupby(events, key=lambda e: e.ts):
        now = present(group)
        if kind == "insert":
            out.extend(e for item, e in now.items() if item not in previous)
        else:
            out.extend(stamp(t, e.seq, item) for item, e in previous.items() if item not in now)
        previous = now
    return out, previous
