"""The parameters of plan nodes that are values, not nodes: XQuery modules, window
specifications and report policies (they take part in a node's equality and digest
as values; :mod:`roses_app.algebra.plan.operators` re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class XQuery:
    """An XQuery 3.1 main module: a mutator or a reducer.

    ``file`` and ``line`` say where ``text`` starts (an xquery/*.xq file at line 1, or
    the feeds.yaml line of inline text), so processor errors can be reported there.
    The text is part of the plan: editing the file changes the stream's fingerprint.
    """

    text: str
    # Where the text is does not change what it means: moving feeds.yaml keeps the
    # stream's fingerprint (and so its checkpoint).
    file: str = field(default="", compare=False, repr=False)
    line: int = field(default=1, compare=False, repr=False)

    def __str__(self) -> str:
        return self.file or "inline XQuery"


@dataclass(frozen=True)
class TimeWindow:
    """ω_time,w,d,f,t0: at time t the events with r−d−w+1 ≤ ts ≤ r−d, where r is the
    last refresh t0 + k·f ≤ t (r = t without a period).  Times are µs (replay ticks)."""

    width: int
    period: int | None = None
    start: int = 0
    delay: int = 0

    def __post_init__(self) -> None:
        if self.width <= 0 or (self.period is not None and self.period <= 0) or self.delay < 0:
            raise ValueError("a time window needs width > 0, period > 0 and delay >= 0")

    @property
    def sliding(self) -> bool:
        """Refreshed at every instant: only a width (and a delay) matter."""
        return self.period is None


@dataclass(frozen=True)
class CountWindow:
    """ω_count,N: the last N events plus every earlier event sharing the first one's ts."""

    size: int

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ValueError("a count window needs N > 0")


@dataclass(frozen=True)
class SessionWindow:
    """Session windows (seed 001): items less than ``gap`` apart in time are one
    session, from its first item's time to its last's; a session closes once time has
    passed its last item by ``gap``.  Read by an aggregate or a group only (a group's
    key has sessions of its own)."""

    gap: int

    def __post_init__(self) -> None:
        if self.gap <= 0:
            raise ValueError("a session window needs a gap > 0")


WindowSpec = TimeWindow | CountWindow | SessionWindow


TICKS = ("batch", "item", "time")


@dataclass(frozen=True)
class Report:
    """When a window's result is published (seed 003, SECRET's report dimension):
    ``on_close`` when the window closes, ``on_change`` whenever its content changes
    (before it closes too: FlameStream's optimistic results), ``every`` (µs) at each
    multiple of that period, when it changed since.  A result is only published when
    it differs from the one published before, and an empty window never is (SECRET's
    non-empty content).  ``tick``: what triggers an evaluation: each arrival of items
    (``batch``, one spool append), each ``item``, or each advance of the clock
    (``time``)."""

    on_close: bool = True
    on_change: bool = False
    every: int | None = None
    tick: str = "batch"

    def __post_init__(self) -> None:
        if self.tick not in TICKS:
            raise ValueError(f"unknown tick {self.tick!r} (expected one of {TICKS})")
        if not (self.on_close or self.on_change or self.every):
            raise ValueError("a report policy needs on-close, on-change or every")


# Largest unit first: a duration is written in the largest unit that divides it.
_UNITS = (
    ("w", 7 * 86_400_000_000),
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("m", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1_000),
    ("us", 1),
)


def duration(micros: int) -> str:
    """µs as feeds.yaml writes them: ``24h``, ``90s``, ``3us`` (``0s`` for none)."""
    if micros == 0:
        return "0s"
    unit, size = next((u, s) for u, s in _UNITS if micros % s == 0)
    return f"{micros // size}{unit}"


def describe_window(spec: WindowSpec) -> str:
    if isinstance(spec, CountWindow):
        return f"ω_count N={spec.size}"
    if isinstance(spec, SessionWindow):
        return f"ω_session gap={duration(spec.gap)}"
    return _describe_time(spec)


def _describe_time(spec: TimeWindow) -> str:
    text = f"ω_time w={duration(spec.width)}"
    if spec.delay:
        text += f" d={duration(spec.delay)}"
    if spec.period is not None:
        text += f" f={duration(spec.period)} t0={duration(spec.start)}"
    return text
