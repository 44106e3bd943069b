"""The ``report:`` and ``tick:`` arguments of an aggregate or group over a periodic
time window or a session window, or of an aggregate over a count window
(:class:`~roses_app.algebra.plan.operators.Report`; seed 003's report dimension).

    report: on-close                  # the default: when the window closes
    report: on-change                 # whenever its items change (before it closes too)
    report: optimistic                # FlameStream's: on-close and on-change
    report: [on-change, {every: 10m}] # combined; non-empty is always on
    tick: batch | item | time         # when the policy is looked at
"""

from __future__ import annotations

from roses_app.algebra.plan.operators import TICKS, Report
from roses_app.config.durations import DURATION_HINT, parse_duration
from roses_app.config.fields import Section
from roses_app.config.operator_registry import OperatorContext
from roses_app.config.yamlmarks import Marked, describe

REPORT_KEYS = ("report", "tick")
NAMED = {
    "on-close": {"on_close": True},
    "on-change": {"on_change": True},
    "optimistic": {"on_close": True, "on_change": True},
    "non-empty": {},  # an empty window is never published: always on
}
HINT = f"one of {', '.join(NAMED)}, {{every: DURATION}}, or a list of them"


def report_argument(ctx: OperatorContext, args: Section, windowed: bool) -> Report:
    """The operator's report policy (the default when it has none); ``windowed``: its
    input is a window a policy applies to.  Mistakes are reported with their line."""
    value, tick_value = args.get("report"), args.get("tick")
    if value is None and tick_value is None:
        return Report()
    if not windowed:
        line = args.key_line("report" if value is not None else "tick")
        ctx.problem(
            line,
            f"{ctx.name}.report and .tick apply to {'an' if ctx.name[0] in 'aeiou' else 'a'} "
            f"{ctx.name} over a periodic time window "
            "(window: {from: ..., time: ..., every: ...}), a session window (gap: ...) "
            "or, for an aggregate, a count window",
        )
        return Report()
    flags: dict[str, object] = {"on_close": False}
    entries = [] if value is None else value.value if isinstance(value.value, list) else [value]
    if value is None:
        flags["on_close"] = True
    for entry in entries:
        if not _read(ctx, entry, flags):
            return Report()
    tick = args.string("tick", "batch")
    if tick not in TICKS:
        ctx.problem(args.key_line("tick"), f"{ctx.name}.tick must be one of {', '.join(TICKS)}")
        return Report()
    if not (flags["on_close"] or flags.get("on_change") or flags.get("every")):
        flags["on_close"] = True  # only non-empty: the default's moment
    return Report(tick=tick, **flags)  # type: ignore[arg-type]


def _read(ctx: OperatorContext, entry: Marked, flags: dict[str, object]) -> bool:
    if isinstance(entry.value, str) and entry.value in NAMED:
        flags.update(NAMED[entry.value])
        return True
    if entry.is_map and set(entry.value) == {"every"}:
        every = entry.value["every"]
        try:
            seconds = parse_duration(every.value)
        except ValueError:
            seconds = 0.0
        if seconds <= 0:
            ctx.problem(
                every.line, f"{ctx.name}.report every must be a duration > 0 ({DURATION_HINT})"
            )
            return False
        flags["every"] = round(seconds * 1_000_000)
        return True
    ctx.problem(entry.line, f"{ctx.name}.report: {HINT}; got {describe(entry)}")
    return False
