"""Logical plan nodes: one frozen dataclass per operator of the ROSES algebra.

Every node records where it came from (feeds.yaml file:line, stream, step id) so
that errors found while compiling or running point back at the user's text.

Plans are DAGs: a stream used by several others is one node object in all of them,
so a plan of a few lines may have 2^N paths.  Nothing may walk it as a tree: a
node's hash and equality come from its :attr:`Node.digest`, computed once per node
from its inputs' digests, and every walk keeps what it did per node.  Node classes
are ``@dataclass(frozen=True, eq=False)`` so that they keep :class:`Node`'s equality
and hash instead of the dataclass ones, which recurse through every path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roses_app.algebra.plan.cached import kept_repr

# the base of the nodes below, and where a node was written
from roses_app.algebra.plan.node import LATER as LATER
from roses_app.algebra.plan.node import Node as Node
from roses_app.algebra.plan.node import Origin as Origin
from roses_app.algebra.plan.node import node_repr

# re-exported: the plan's value parameters are imported from here too
from roses_app.algebra.plan.specs import TICKS as TICKS
from roses_app.algebra.plan.specs import CountWindow as CountWindow
from roses_app.algebra.plan.specs import Report as Report
from roses_app.algebra.plan.specs import SessionWindow as SessionWindow
from roses_app.algebra.plan.specs import TimeWindow as TimeWindow
from roses_app.algebra.plan.specs import WindowSpec as WindowSpec
from roses_app.algebra.plan.specs import XQuery as XQuery

# What a source's event time is: see :class:`Source`.
TIME_MODES = ("ingest", "published")


@dataclass(frozen=True, eq=False)
class Source(Node):
    """The events of one configured source (feed or mailbox).  ``time`` says which of
    an item's times is its event time: ``ingest`` (when it entered the spool: in
    order) or ``published`` (its publication time, else its ingest time: items may
    then come out of order)."""

    name: str
    time: str = field(default="ingest", metadata=LATER)

    def __repr__(self) -> str:  # _repr's text, sooner: every stream reads sources
        if self.time == "ingest":
            return f"Source(name={self.name!r})"
        return f"Source(name={self.name!r}, time={self.time!r})"

    def __post_init__(self) -> None:
        if self.time not in TIME_MODES:
            raise ValueError(f"unknown time {self.time!r} (expected one of {TIME_MODES})")


@dataclass(frozen=True, eq=False)
class Filter(Node):
    """σ_pred: keep the items for which the XPath observer is true."""

    input: Node
    where: str


@dataclass(frozen=True, eq=False)
class Map(Node):
    """μ_map: replace each item by the result of an item function; λ (empty) drops it.

    Exactly one of ``xpath`` (an accessor: the selected part of the item) or
    ``xquery`` (a mutator over ``$i``) is set.
    """

    input: Node
    xpath: str = ""
    xquery: XQuery | None = None

    def __post_init__(self) -> None:
        if bool(self.xpath) == (self.xquery is not None):
            raise ValueError("Map needs exactly one of xpath or xquery")


@dataclass(frozen=True, eq=False)
class Union(Node):
    """∪: every event of every input, ordered by timestamp."""

    inputs: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Split(Node):
    """Ψ_split: route each item to the named output its XPath returns.

    Only allowed at the root of a stream; each name becomes its own feed.
    """

    input: Node
    by: str


@dataclass(frozen=True, eq=False)
class Window(Node):
    """The physical Window: at each timestamp t of the input, every event of ω(input, t),
    stamped t (its own seq kept).  As the input of a join, semijoin or diff it is the
    WindowCall of the other side instead: the content at the other event's time."""

    input: Node
    spec: WindowSpec


JOIN_KINDS = ("inner", "left", "full", "product")


@dataclass(frozen=True, eq=False)
class Join(Node):
    """⋈ (and ×): the rewrite Union(Join(Window(f1), WindowCall(f2)), Join(Window(f2),
    WindowCall(f1))) [∪ Diff for outer kinds], in its event form: each event meets the
    other side's window at its own time.  A pair is emitted once, at the later of the
    two timestamps.  ``on`` is a two-item observer ($i1, $i2); ``combine`` a mutator
    (None: the built-in composition).  ``product`` is a full join on true()."""

    left: Node
    right: Node
    kind: str = "inner"
    on: str = "true()"
    combine: XQuery | None = None
    # Over items read in publication time (roses_app.algebra.time.latejoin): how long (µs)
    # an item may come after the clock and still be joined, and whether an item
    # without a partner is published at once, taken back if one comes (optimistic).
    lateness: int = field(default=0, metadata=LATER)
    optimistic: bool = field(default=False, metadata=LATER)

    def __post_init__(self) -> None:
        if self.kind not in JOIN_KINDS:
            raise ValueError(f"unknown join kind {self.kind!r}")

    def __repr__(self) -> str:
        return node_repr(self)


@dataclass(frozen=True, eq=False)
class Semijoin(Node):
    """Semijoin_P(f, WindowCall(right)): the left events with a partner in the right
    side's window at their time."""

    left: Node
    right: Node
    on: str
    lateness: int = field(default=0, metadata=LATER)  # as Join's

    def __repr__(self) -> str:
        return node_repr(self)


@dataclass(frozen=True, eq=False)
class Diff(Node):
    """Diff_P(f, WindowCall(right)): the left events with no partner in the right side's
    window at their time."""

    left: Node
    right: Node
    on: str
    lateness: int = field(default=0, metadata=LATER)  # as Join's
    optimistic: bool = field(default=False, metadata=LATER)  # as Join's

    def __repr__(self) -> str:
        return node_repr(self)


def optimistic(node: Node) -> bool:
    """Whether ``node`` is a join, a difference or a windowed grouping with
    ``report: optimistic``."""
    return isinstance(node, Join | Diff | WindowedGrouping) and node.optimistic


@dataclass(frozen=True, eq=False)
class Delta(Node):
    """δ⁺ (``insert``): at each input timestamp, the items not there at the previous
    one; δ⁻ (``delete``): the items of the previous timestamp that are gone."""

    input: Node
    kind: str = "insert"

    def __post_init__(self) -> None:
        if self.kind not in ("insert", "delete"):
            raise ValueError(f"unknown delta kind {self.kind!r}")


@dataclass(frozen=True, eq=False)
class Aggregate(Node):
    """α_aggr: one item per time (``$items``: the input's items at that time).  Over a
    periodic time window: one item per window, when it closes."""

    input: Node
    reduce: XQuery
    # The stream the results are published in: part of their guid.
    stream: str = ""
    # Over items read in publication time (roses_app.algebra.time.lateness): how long (µs)
    # a closed window still takes late items, and what becomes of items later still
    # (``drop``, or ``publish`` in the stream's ``late`` part).
    lateness: int = field(default=0, metadata=LATER)
    late: str = field(default="drop", metadata=LATER)
    report: Report = field(default=Report(), metadata=LATER)

    def __repr__(self) -> str:
        return node_repr(self)


@dataclass(frozen=True, eq=False)
class GroupBy(Node):
    """γ_group: like α, one item per time (or window) and key (the XPath ``by``)."""

    input: Node
    by: str
    reduce: XQuery
    stream: str = ""
    lateness: int = field(default=0, metadata=LATER)  # as Aggregate's
    late: str = field(default="drop", metadata=LATER)
    report: Report = field(default=Report(), metadata=LATER)

    def __repr__(self) -> str:
        return node_repr(self)


@dataclass(frozen=True, eq=False)
class WindowedGrouping(Node):
    """FlameStream's windowed grouping: for each event, the reducer over the last
    ``size`` items of its key's bucket (itself last), at the event's time."""

    input: Node
    by: str
    size: int
    reduce: XQuery
    # Over items read in publication time (roses_app.algebra.time.lategrouping): the stream
    # the results are published in (part of their guid), how long (µs) an item may
    # come after the clock and still be grouped, and whether results are published at
    # once and revised in place (optimistic) or once final.
    stream: str = field(default="", metadata=LATER)
    lateness: int = field(default=0, metadata=LATER)
    optimistic: bool = field(default=False, metadata=LATER)

    def __repr__(self) -> str:
        return node_repr(self)


@dataclass(frozen=True, eq=False)
class Nest(Node):
    """Nest: one item per input timestamp holding that timestamp's items, in order."""

    input: Node


@dataclass(frozen=True, eq=False)
class Unnest(Node):
    """Unnest: each ``item`` element nested in an input item becomes an event."""

    input: Node


NODE_TYPES: tuple[type[Node], ...] = (
    Source,
    Filter,
    Map,
    Union,
    Split,
    Window,
    Join,
    Semijoin,
    Diff,
    Delta,
    Aggregate,
    GroupBy,
    WindowedGrouping,
    Nest,
    Unnest,
)


for _kind in NODE_TYPES:  # each node's text made once (see kept_repr)
    _kind.__repr__ = kept_repr(_kind.__repr__)  # type: ignore[method-assign]


@dataclass(frozen=True)
class Stream:
    """A named continuous query of feeds.yaml: its plan and how it is published."""

    name: str
    plan: Node
    origin: Origin = field(default=Origin(), compare=False, repr=False)

    @property
    def is_split(self) -> bool:
        return isinstance(self.plan, Split)
