"""A join, semijoin or difference over operators' results
(:func:`~roses_app.algebra.eventtime.released_joined`), one micro-batch at a time:
the rule of :mod:`roses_app.algebra.latejoin` over what both sides release.

Each side's rows are those a released run would read
(:func:`roses_app.spark.lateunits.fed_arrivals`); the operator first releases both
sides together (:class:`~roses_app.algebra.release_fed.SidesRelease`), then pairs
them as over items, in time order, nothing late.  The late graph's operator runs it
(:mod:`roses_app.spark.lategraph`); a join of items is
:class:`roses_app.spark.lateunits.JoinUnit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roses_app.algebra.eventtime import released_joined
from roses_app.algebra.latejoin import LateJoin, join_keyed, join_kind
from roses_app.algebra.lateness import RELEASED_LATENESS, Arrival, arrival_groups
from roses_app.algebra.plan import Diff, Join, Semijoin, optimistic
from roses_app.algebra.release_fed import SidesRelease, fed_horizon, side_shape
from roses_app.spark import counts
from roses_app.spark.late import with_clock
from roses_app.spark.registry import Namespaces

Row = tuple[int, int, str | None, str]  # ts, seq, item, part


@dataclass(frozen=True)
class ReleasedJoin:
    """A join over operators' results
    (:func:`~roses_app.algebra.eventtime.released_joined`) with one micro-batch,
    without Spark (the processor and the tests drive it): its sides'
    :class:`~roses_app.algebra.release_fed.SidesRelease`, then :class:`LateJoin` over
    what they release, in time order (each time one arrival, nothing late)."""

    node: Join | Semijoin | Diff
    namespaces: Namespaces
    on_error: counts.ErrorHook

    @property
    def shapes(self) -> tuple[tuple[int, int | None], ...]:
        """Each side's :func:`~roses_app.algebra.release_fed.side_shape`."""
        sides = released_joined(self.node)
        assert sides is not None
        return tuple(side_shape(b, self.node.lateness) for b in (sides[0], sides[2]))

    def advance(
        self,
        saved: dict[str, Any] | None,
        left: list[list[Arrival]],
        right: list[list[Arrival]],
    ) -> tuple[list[Row], dict[str, Any], tuple[int, int]]:
        """The rows to emit (results, heartbeats, the horizon told), the state to
        save, and the counts (items too late, results taken back)."""
        from roses_app.xmlfn.pairs import advance_join, late_join_results

        node, sides = self.node, released_joined(self.node)
        assert sides is not None
        release = SidesRelease.load(self.shapes, saved and saved["release"])
        released, late = release.advance(left, right)
        kind, keyed = join_kind(node), join_keyed(node)
        state = saved and saved["join"]
        join = LateJoin.load(
            sides[1], sides[3], RELEASED_LATENESS, kind, state, optimistic(node), keyed
        )
        planned = advance_join(
            node, join, arrival_groups((a.time, a) for a in released), self.namespaces
        )
        out, revised = late_join_results(node, join, planned, self.namespaces, self.on_error)
        found: list[Row] = [(ts, seq, item, "") for ts, seq, item in out]
        rows = with_clock(found, planned.heartbeats, fed_horizon(node, join.clock))
        return rows, {"release": release.dump(), "join": join.dump()}, (len(late), revised)
