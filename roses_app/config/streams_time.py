"""feeds.yaml operators of time: windows, joins, semijoin, diff, delta, aggregation,
group-by, windowed grouping, nest and unnest (registered on import).

```yaml
window:    {from: X, time: 24h}                       # ω_time,w (sliding)
window:    {from: X, time: 1d, every: 1d, start: 0s, delay: 0s}   # periodic (start: a time too)
window:    {from: X, count: 8}                         # ω_count,N
join:      {left: A, right: {window: ...}, on: XPATH, kind: inner|left|full, combine: XQ}
product:   {left: A, right: B, combine: XQ}
semijoin:  {left: A, right: {window: ...}, on: XPATH}
diff:      {left: A, right: {window: ...}, on: XPATH}
delta:     {from: X, kind: insert|delete}
aggregate: {from: X, reduce: XQ}                       # α
group:     {from: X, by: XPATH, reduce: XQ}            # γ
grouping:  {from: X, by: XPATH, window: N, reduce: XQ} # FlameStream windowed grouping
nest:      {from: X}
unnest:    {from: X}
```
Durations are µs in the plan (``3us`` addresses replay ticks).
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

from roses_app.algebra.plan.operators import (
    Aggregate,
    CountWindow,
    Delta,
    Diff,
    GroupBy,
    Join,
    Nest,
    Node,
    Semijoin,
    SessionWindow,
    TimeWindow,
    Unnest,
    Window,
    WindowedGrouping,
    WindowSpec,
)
from roses_app.algebra.time.eventtime import event_timed, reportable_input
from roses_app.config.durations import DURATION_HINT, parse_duration
from roses_app.config.fields import Section
from roses_app.config.operator_registry import (
    Builder,
    OperatorContext,
    register_operator,
    xquery_argument,
)
from roses_app.config.streams_report import REPORT_KEYS, report_argument
from roses_app.config.yamlmarks import Marked, describe

MICROS = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ISO_DAY = re.compile(r"\d{4}-\d\d-\d\d")
PAIR = ("i1", "i2")
ITEMS = ("items", "key")
LATE_KEYS = ("lateness", "late")
WINDOWED_KEYS = (*LATE_KEYS, *REPORT_KEYS)


def _micros(ctx: OperatorContext, args: Section, key: str, *, zero_ok: bool) -> int | None:
    seconds = args.duration(key, None, positive=not zero_ok)
    return None if seconds is None else round(seconds * MICROS)


def _time(value: object) -> datetime | None:
    """``value`` as an aware time: a YAML timestamp or date (PyYAML reads an unquoted
    ``2024-01-01T00:00:00Z`` as a datetime, ``2024-01-01`` as a date) or an ISO-8601
    string the same; UTC when it has no offset, as YAML says.  None: it looks like no
    time (a duration, say); ValueError: it looks like one and is not."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, date):
        when = datetime(value.year, value.month, value.day)
    elif isinstance(value, str) and ("T" in value or _ISO_DAY.match(value.strip())):
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    else:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _start(ctx: OperatorContext, args: Section) -> int:
    """t0: an ISO-8601 time (quoted or not), or a duration after the epoch (``0s`` by
    default)."""
    value = args.get("start")
    if value is None:
        return 0
    try:
        when = _time(value.value)
    except ValueError:
        ctx.problem(value.line, f"window.start {value.value!r} is not an ISO-8601 time")
        return 0
    if when is not None:
        return (when - EPOCH) // timedelta(microseconds=1)
    try:
        return round(parse_duration(value.value) * MICROS)
    except ValueError:
        ctx.problem(
            value.line,
            f"window.start must be an ISO-8601 time (2024-01-01T00:00:00Z) or a duration "
            f"after the epoch ({DURATION_HINT}), got {describe(value)}",
        )
        return 0


def _window_spec(ctx: OperatorContext, args: Section) -> WindowSpec | None:
    if sum(key in args for key in ("time", "count", "gap")) != 1:
        ctx.problem(
            args.line,
            "window takes one of time (a duration), count (a number of items) or gap (a "
            "duration: session windows)",
        )
        return None
    if "gap" in args:
        for key in ("every", "start", "delay"):
            if key in args:
                ctx.problem(args.key_line(key), f"window.{key} only applies to time windows")
        gap = _micros(ctx, args, "gap", zero_ok=False)
        return None if gap is None else SessionWindow(gap)
    if "count" in args:
        for key in ("every", "start", "delay"):
            if key in args:
                ctx.problem(args.key_line(key), f"window.{key} only applies to time windows")
        size = args.integer("count", None, minimum=1)
        return None if size is None else CountWindow(size)
    width = _micros(ctx, args, "time", zero_ok=False)
    period = _micros(ctx, args, "every", zero_ok=False) if "every" in args else None
    delay = _micros(ctx, args, "delay", zero_ok=True) if "delay" in args else 0
    start = _start(ctx, args)
    if "start" in args and period is None:
        ctx.problem(args.key_line("start"), "window.start needs every (a periodic window)")
    if width is None or delay is None or ("every" in args and period is None):
        return None
    return TimeWindow(width, period, start, delay)


def _window(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(
        value, required=("from",), optional=("time", "count", "gap", "every", "start", "delay")
    )
    source = ctx.input(args.get("from"))
    spec = _window_spec(ctx, args) if args.ok else None
    if source is None or spec is None:
        return None
    return Window(source, spec, origin=ctx.origin)


def _binary_input(ctx: OperatorContext, args: Section, key: str) -> Node | None:
    """A join-like input: a stream, or a sliding time window over one (its WindowCall).

    Periodic and count windows are not taken: on Spark a join is a stream-stream join
    whose window must be a time range around each event."""
    node = ctx.input(args.get(key), f".{key}")
    if isinstance(node, Window):
        spec = node.spec
        if not isinstance(spec, TimeWindow) or spec.period is not None:
            ctx.problem(
                args.key_line(key),
                f"{ctx.name}.{key}: a {ctx.name} input may be a sliding time window "
                "(time: and delay:), not a count or periodic window; aggregate those instead",
            )
            return None
    return node


def _observer(ctx: OperatorContext, args: Section, required: bool) -> str | None:
    if "on" not in args:
        if required:
            ctx.problem(args.line, f"{ctx.name} needs on: (an XPath over $i1 and $i2)")
            return None
        return "true()"
    return ctx.xpath(args, "on", variables=PAIR)


def _join(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(
        value,
        required=("left", "right"),
        optional=("on", "kind", "combine", "lateness", "report"),
    )
    left, right = _binary_input(ctx, args, "left"), _binary_input(ctx, args, "right")
    kind: str | None = args.string("kind", "inner")
    if kind not in ("inner", "left", "full"):
        ctx.problem(
            args.key_line("kind"),
            f"join.kind must be inner, left or full, got {kind!r} (a product is product:)",
        )
        kind = None
    on = _observer(ctx, args, required=True)
    combine = xquery_argument(ctx, args, "combine", variables=PAIR) if "combine" in args else None
    timing = _timing(ctx, args, left, right, kind)
    if kind is None or on is None or timing is None or ("combine" in args and combine is None):
        return None
    assert left is not None and right is not None  # timing says so
    return Join(left, right, kind, on, combine, *timing, origin=ctx.origin)


def _timing(
    ctx: OperatorContext, args: Section, left: Node | None, right: Node | None, kind: str | None
) -> tuple[int, bool] | None:
    """``lateness`` and ``report`` of a binary operator (``kind``: its report's rules;
    None: a kind already reported wrong, whose report is not checked), checked even
    when its other arguments have mistakes, so all are reported at once; None when a
    side is missing."""
    if left is None or right is None:
        return None
    timed = _timed_side(left, right)
    lateness, _ = _lateness(ctx, args, timed)
    optimistic = kind is not None and _optimistic(ctx, args, timed, kind)
    return lateness, optimistic


def _timed_side(left: Node, right: Node) -> Node:
    """The side whose items are read in publication time, if one is (for ``lateness``)."""
    return right if event_timed(right) else left


def _product(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(
        value, required=("left", "right"), optional=("combine", "lateness", "report")
    )
    left, right = _binary_input(ctx, args, "left"), _binary_input(ctx, args, "right")
    combine = xquery_argument(ctx, args, "combine", variables=PAIR) if "combine" in args else None
    timing = _timing(ctx, args, left, right, "product")
    if timing is None or ("combine" in args and combine is None):
        return None
    assert left is not None and right is not None  # timing says so
    return Join(left, right, "product", "true()", combine, *timing, origin=ctx.origin)


def _matching(node_type: type[Semijoin | Diff]) -> Builder:
    optional = ("lateness", "report") if node_type is Diff else ("lateness",)

    def build(ctx: OperatorContext, value: Marked) -> Node | None:
        args = ctx.arguments(value, required=("left", "right", "on"), optional=optional)
        left, right = _binary_input(ctx, args, "left"), _binary_input(ctx, args, "right")
        on = _observer(ctx, args, required=True)
        timing = _timing(ctx, args, left, right, "diff")  # (a semijoin takes no report:)
        if on is None or timing is None:
            return None
        assert left is not None and right is not None  # timing says so
        lateness, optimistic = timing
        if node_type is Diff:
            return Diff(left, right, on, lateness, optimistic, origin=ctx.origin)
        return node_type(left, right, on, lateness, origin=ctx.origin)

    return build


def _delta(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(value, required=("from",), optional=("kind",))
    source = ctx.input(args.get("from"))
    kind = args.string("kind", "insert")
    if kind not in ("insert", "delete"):
        ctx.problem(args.key_line("kind"), f"delta.kind must be insert or delete, got {kind!r}")
        return None
    return None if source is None else Delta(source, kind, origin=ctx.origin)


LATE_POLICIES = ("drop", "publish")


def _lateness(ctx: OperatorContext, args: Section, source: Node | None) -> tuple[int, str]:
    """``lateness`` (default settings.lateness) and ``late`` (drop | publish): for
    windows over publication time (roses_app.algebra.time.lateness).  Over ingest time
    items come in order, never late: the node keeps the defaults."""
    if source is None or not event_timed(source):
        for key in LATE_KEYS:
            if key in args:
                ctx.problem(
                    args.key_line(key),
                    f"{ctx.name}.{key} applies to items read in publication time (time: "
                    "published), which may come late; in ingest time items come in "
                    "order (settings.lateness delays when windows close)",
                )
        return 0, "drop"
    seconds = args.duration("lateness", None, positive=False)
    lateness = ctx.plans.lateness if seconds is None else round(seconds * 1_000_000)
    late = args.string("late", "drop")
    if late not in LATE_POLICIES:
        ctx.problem(
            args.key_line("late"),
            f"{ctx.name}.late must be drop or publish (publish: items later than the "
            f"lateness go to the stream's late feed), got {late!r}",
        )
        late = "drop"
    return lateness, late


JOIN_REPORTS = ("on-close", "optimistic")


IN_ORDER = {
    "grouping": "in ingest time items come in order, so a result is final when it comes",
}
ALONE_KNOWN = "in ingest time an item's lack of a partner is known when it comes"


def _optimistic(ctx: OperatorContext, args: Section, source: Node, kind: str) -> bool:
    """``report: optimistic`` of a left or full join, a product, a difference or a
    windowed grouping over publication time: an item without a partner is published
    at its arrival, and taken back (replaced in place) when a partner comes
    (roses_app.algebra.time.latejoin); a grouping's result is published at its item's
    arrival, and revised in place when a late item changes it
    (roses_app.algebra.time.lategrouping)."""
    if "report" not in args:
        return False
    line = args.key_line("report")
    report = args.string("report", "on-close")
    if not event_timed(source):
        ctx.problem(
            line,
            f"{ctx.name}.report applies to items read in publication time (time: "
            f"published); {IN_ORDER.get(kind, ALONE_KNOWN)}, and published then",
        )
        return False
    if report not in JOIN_REPORTS:
        ctx.problem(line, f"{ctx.name}.report must be on-close or optimistic, got {report!r}")
        return False
    if kind == "inner" and report == "optimistic":
        ctx.problem(
            line,
            "join.report: optimistic applies to a left or full join (an inner join "
            "publishes each pair as soon as both items are there already)",
        )
        return False
    return report == "optimistic"


def _aggregate(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(value, required=("from", "reduce"), optional=WINDOWED_KEYS)
    source = ctx.input(args.get("from"))
    reduce = xquery_argument(ctx, args, "reduce", variables=ITEMS)
    lateness, late = _lateness(ctx, args, source)
    report = report_argument(ctx, args, source is not None and reportable_input(source, True))
    if source is None or reduce is None:
        return None
    stream = ctx.origin.stream
    return Aggregate(source, reduce, stream, lateness, late, report, origin=ctx.origin)


def _group(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(value, required=("from", "by", "reduce"), optional=WINDOWED_KEYS)
    source = ctx.input(args.get("from"))
    by = ctx.xpath(args, "by")
    reduce = xquery_argument(ctx, args, "reduce", variables=ITEMS)
    lateness, late = _lateness(ctx, args, source)
    report = report_argument(ctx, args, source is not None and reportable_input(source, False))
    if source is None or by is None or reduce is None:
        return None
    stream = ctx.origin.stream
    return GroupBy(source, by, reduce, stream, lateness, late, report, origin=ctx.origin)


def _grouping(ctx: OperatorContext, value: Marked) -> Node | None:
    args = ctx.arguments(
        value, required=("from", "by", "window", "reduce"), optional=("lateness", "report")
    )
    source = ctx.input(args.get("from"))
    by = ctx.xpath(args, "by")
    size = args.integer("window", None, minimum=1)
    reduce = xquery_argument(ctx, args, "reduce", variables=ITEMS)
    lateness, _ = _lateness(ctx, args, source)
    optimistic = source is not None and _optimistic(ctx, args, source, "grouping")
    if source is None or by is None or size is None or reduce is None:
        return None
    if not event_timed(source):  # the plan of ingest time, as before (its fingerprint)
        return WindowedGrouping(source, by, size, reduce, origin=ctx.origin)
    stream = ctx.origin.stream
    return WindowedGrouping(
        source, by, size, reduce, stream, lateness, optimistic, origin=ctx.origin
    )


def _plain(node_type: type[Nest | Unnest]) -> Builder:
    def build(ctx: OperatorContext, value: Marked) -> Node | None:
        args = ctx.arguments(value, required=("from",))
        source = ctx.input(args.get("from"))
        return None if source is None else node_type(source, origin=ctx.origin)

    return build


register_operator("window", _window)
register_operator("join", _join)
register_operator("product", _product)
register_operator("semijoin", _matching(Semijoin))
register_operator("diff", _matching(Diff))
register_operator("delta", _delta)
register_operator("aggregate", _aggregate)
register_operator("group", _group)
register_operator("grouping", _grouping)
register_operator("nest", _plain(Nest))
register_operator("unnest", _plain(Unnest))
