"""``roses explain``: a summary of the plans and queries by default; streams' plans,
the global plan's nodes and Spark's plans on request.

A config of a hundred thousand subscriptions has half a million plan nodes: written
out they are hundreds of megabytes, and Spark's plans of its queries take the JVM's
start and the fused stage's construction.  So without stream names the command
prints :mod:`roses_app.algebra.planner.explain_summary` (counts, the most shared nodes, the
largest streams, which query runs how many streams), for which Spark is not started;
``roses explain STREAM...`` prints those streams' plans, as written and rewritten,
the global plan's nodes they use and Spark's plans; ``--all`` every stream's plans
and every node.  ``--logical-only``: no Spark, and no query layout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from roses_app.config.model import Config
from roses_app.heap import collector_paused

if TYPE_CHECKING:  # (pyspark is imported by roses_app.spark only, when Spark runs)
    from pyspark.sql import DataFrame, SparkSession

    from roses_app.algebra.plan.operators import Stream
    from roses_app.spark.layout import Layout

EXIT_OK, EXIT_USAGE = 0, 2


def explain(config: Config, names: Sequence[str], *, every: bool, spark: bool) -> int:
    """Print what ``roses explain`` prints (see above); the exit code."""
    unknown = [n for n in names if n not in config.streams]
    if unknown:
        known = list(config.streams)
        more = f", ... ({len(known) - 20:,} more)" if len(known) > 20 else ""
        print(
            f"unknown stream(s): {', '.join(unknown)} (known: {', '.join(known[:20])}{more})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # the plans and layouts are many small objects without cycles (see heap)
    with collector_paused():
        if every or names:
            _in_full(config, list(config.streams) if every else names, every, spark)
        else:
            _summarized(config, spark)
    return EXIT_OK


def _rewritten(config: Config) -> tuple[list[Stream], dict[str, list[str]]]:
    from roses_app.algebra.planner.rewrite import rewrite_streams

    written = [s.stream for s in config.streams.values()]
    applied: dict[str, list[str]] = {}
    return rewrite_streams(written, config.settings.namespaces, applied=applied), applied


def _summarized(config: Config, with_queries: bool) -> None:
    from roses_app.algebra.planner.explain_summary import summary
    from roses_app.algebra.planner.globalplan import GlobalPlan

    rewritten, applied = _rewritten(config)
    queries: Mapping[str, str] | None = None
    if with_queries:
        layout = _layout(config, rewritten)
        plan, queries = layout.plan, layout.queries()
    else:
        plan = GlobalPlan.of(rewritten)
    written = [s.stream for s in config.streams.values()]
    published = sum(1 for s in config.streams.values() if s.publish is not None)
    print(summary(written, applied, plan, published, queries))


def _layout(config: Config, rewritten: Sequence[Stream]) -> Layout:
    """The queries that would run now (Spark's cores: this machine's), from the
    checkpoints and the store; nothing is started."""
    from roses_app.spark.layout import plan_layout
    from roses_app.store import Store

    settings = config.settings
    with Store(settings.data_dir / "store.sqlite") as store:
        checkpoints = settings.data_dir / "checkpoints"
        cores = os.cpu_count() or 1
        return plan_layout(rewritten, settings.namespaces, checkpoints, store, 0, cores)


def _in_full(config: Config, names: Sequence[str], every: bool, spark: bool) -> None:
    from roses_app.algebra.planner.explain import format_global

    # Spark's JVM starts (another process) while the streams are rewritten
    with ThreadPoolExecutor(1, thread_name_prefix="roses-spark-start") as pool:
        session: Future[SparkSession] | None = (
            pool.submit(_spark_session, config) if spark else None
        )
        rewritten, applied = _rewritten(config)
        _print_logical(config, names, rewritten, applied)
        if session is None:
            return
        layout, frames = _spark_frames(config, session.result(), rewritten)
    shown = None if every else set(names)
    what = "every stream" if every else "the nodes of these streams"
    print(f"== the global plan ({what}; equal sub-plans are one node)")
    print(format_global(layout.plan, layout.queries(), only=shown))
    for qid, frame in frames:
        print(f"== Spark query {qid}: its plan")
        frame.explain(extended=True)


def _print_logical(
    config: Config,
    names: Sequence[str],
    rewritten: Sequence[Stream],
    applied: Mapping[str, Sequence[str]],
) -> None:
    """Each stream's plan as written, then as rewritten; sub-plans shared by several
    streams (computed once) are marked in both."""
    from roses_app.algebra.planner.explain import Sharing, format_plan
    from roses_app.algebra.planner.rewrite import summary

    written = [stream.stream for stream in config.streams.values()]
    after_plans = {s.name: s for s in rewritten}
    before = Sharing.of({s.name: s.plan for s in written})
    after = Sharing.of({name: s.plan for name, s in after_plans.items()})
    for name in names:
        text = format_plan(config.streams[name].plan, sharing=before)
        new = format_plan(after_plans[name].plan, sharing=after)
        print(f"== stream {name}: logical plan")
        print(text)
        if new == text:
            print(f"== stream {name}: rewritten plan: unchanged (no rule applies)")
            continue
        print(f"== stream {name}: rewritten plan (rules: {summary(applied[name])})")
        print(new)


def _spark_session(config: Config) -> SparkSession:
    from roses_app.spark.session import build_session

    settings = config.settings
    return build_session(settings.spark, settings.data_dir / "cache", finite=True)


def _spark_frames(
    config: Config, spark: SparkSession, rewritten: Sequence[Stream]
) -> tuple[Layout, list[tuple[str, DataFrame]]]:
    """What the queries would run now (nothing is started): their layout and frames."""
    from roses_app.spark.runner import Engine, query_frames
    from roses_app.store import Store

    settings = config.settings
    log_dir = settings.data_dir / "spool" / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    with Store(settings.data_dir / "store.sqlite") as store:
        engine = Engine(spark, settings.namespaces, log_dir, settings.data_dir, store)
        return query_frames(engine, rewritten, rewritten=True)


__all__ = ["explain"]
