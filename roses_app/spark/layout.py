"""Which Spark queries run the global plan, and what each must catch up on.

Spark's rules decide the split (see docs/dataflow.md, "Inside each stage"):

* **One stateless query** computes every stateless stream and every frontier node in
  one fused stage.  It has no operator state, so its plan may change between two
  runs with the same checkpoint: a stream added, edited or removed only changes the
  fused program.  A new or changed stateless stream is computed once over the part
  of the spool the query has already read (a *backfill*), then follows live.
* **Stateful generations.**  Spark binds a query's operator state to its plan: a
  checkpoint cannot take a stateful operator added, removed or changed.  So the
  stateful streams of a config run together in one query, and the stateful streams
  added or changed later in a new query of their own (a new generation), whose
  frontier rows for the past come from a backfill.  A generation keeps running its
  own plans while at least one of its streams is still in the config unchanged; the
  outputs of its other streams are dropped.

A generation's plans are kept beside its checkpoint (pickled), so that it can be
started again exactly as it was.
"""

from __future__ import annotations

import logging
import pickle
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from roses_app.algebra.plan.operators import Stream
from roses_app.algebra.planner.globalplan import GlobalPlan, fingerprint, stream_fingerprint
from roses_app.algebra.planner.rewrite import rewrite_streams

log = logging.getLogger(__name__)

Namespaces = tuple[tuple[str, str], ...]
STATELESS_QUERY = "stateless"
GENERATION_PREFIX = "gen-"
PLANS_FILE = "plans.pickle"
# How a generation's plans become Spark operators.  A checkpoint holds the state of
# the operators it was started with, so a generation saved under another version is
# started again (2: each head once, the stateless tails fused; 3: a periodic late
# window's items in a map state of slices; 4: the late operators tell their clock and
# their heartbeats, and a released run reads a key column; 5: a released run tells
# the last time it released, and names windows' results by branch and guid; 6: the
# operators over publication time that read one another run in one operator, each
# unit's state under its own name).
LOWERING = 6
# Where the plan's classes were before the algebra became packages (issue 45): the
# plans a generation saved then name these modules, and still start it again as it was
MOVED_MODULES = {
    "roses_app.algebra.plan": "roses_app.algebra.plan.operators",
    "roses_app.algebra.node": "roses_app.algebra.plan.node",
    "roses_app.algebra.specs": "roses_app.algebra.plan.specs",
}


class Ledger(Protocol):
    """What the engine keeps in the store beside the output rows."""

    def position(self, query_id: str) -> int:
        """The latest spool seq a query has written the output of (0: none)."""
        ...

    def versions(self) -> dict[str, str]:
        """stream -> fingerprint of the stateless streams' plans as published."""
        ...


@dataclass(frozen=True)
class Generation:
    """A query of stateful streams: the plans it runs, those whose output is
    current, and where its frontier rows switch from its backfill to the live log."""

    id: str
    streams: tuple[Stream, ...]
    live: frozenset[str]
    boundary: int
    fresh: bool
    # at most this many Spark operators over publication time (0: one per group of
    # units that read one another, as generations saved without it were started):
    # fixed when the generation starts, since its checkpoint holds those operators
    late_operators: int = 0


@dataclass(frozen=True)
class Layout:
    """The queries of one start of the engine."""

    plan: GlobalPlan
    stateless: tuple[Stream, ...]
    fingerprints: dict[str, str]
    # stateless streams new or changed since they were published, with the spool
    # position their backfill goes up to (0: the query starts afresh, no backfill)
    new_stateless: tuple[Stream, ...]
    position: int
    generations: tuple[Generation, ...]
    dropped: tuple[str, ...]  # generations no stream needs any more
    # published stateless streams no longer in the config: their output is forgotten,
    # so that adding one again computes it over the whole spool
    removed: tuple[str, ...] = ()

    def query_ids(self) -> list[str]:
        first = [STATELESS_QUERY] if self.stateless or self.generations else []
        return first + [g.id for g in self.generations]

    def queries(self) -> dict[str, str]:
        """stream -> the id of the query that writes its output."""
        out = {s.name: STATELESS_QUERY for s in self.stateless}
        for generation in self.generations:
            out.update(dict.fromkeys(generation.live, generation.id))
        return out


def load_generation(folder: Path) -> tuple[tuple[Stream, ...], int, int] | None:
    """The plans a generation runs, its boundary and its late operators, or None when
    they cannot be read back (written by another version of ROSES: the generation is
    then started again)."""
    try:
        with open(folder / PLANS_FILE, "rb") as fh:
            saved = _PlansUnpickler(fh).load()
    except (OSError, pickle.UnpicklingError, AttributeError, ImportError, EOFError) as exc:
        log.warning("cannot read the plans of %s (%s): it starts again", folder.name, exc)
        return None
    ok = isinstance(saved, tuple) and len(saved) in (3, 4) and isinstance(saved[1], int)
    if not ok or not all(isinstance(s, Stream) for s in saved[0]):
        return None
    if saved[2] != LOWERING:
        log.info("%s was started by an earlier version of ROSES: it starts again", folder.name)
        return None
    late_operators = saved[3] if len(saved) == 4 and isinstance(saved[3], int) else 0
    return tuple(saved[0]), saved[1], late_operators


class _PlansUnpickler(pickle.Unpickler):
    """Reads a generation's plans, those saved before the plan's modules moved too."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def save_generation(folder: Path, generation: Generation) -> None:
    """The plans and the boundary of a generation, kept beside its checkpoint."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (PLANS_FILE + ".tmp")
    with open(tmp, "wb") as fh:
        saved = (tuple(generation.streams), generation.boundary, LOWERING)
        pickle.dump((*saved, generation.late_operators), fh)
    tmp.replace(folder / PLANS_FILE)


@dataclass(frozen=True)
class Planned:
    """The rewritten streams and their global plan: what needs no SparkSession, so a
    caller can work it out while the JVM starts (at 100,000 streams, seconds)."""

    streams: tuple[Stream, ...]
    plan: GlobalPlan


def plan_streams(streams: Sequence[Stream], namespaces: Namespaces) -> Planned:
    rewritten = tuple(rewrite_streams(streams, namespaces))
    return Planned(rewritten, GlobalPlan.of(rewritten))


def plan_layout(
    streams: Sequence[Stream],
    namespaces: Namespaces,
    checkpoints: Path,
    ledger: Ledger,
    archived: int = 0,
    late_operators: int = 0,
    plan: GlobalPlan | None = None,
) -> Layout:
    """Decide the queries: keep what can go on, start what is new (``plan``: the
    global plan of ``streams``, when the caller has it already).

    ``archived``: the latest seq of the spool files Spark has archived.  Without a
    stateless checkpoint the query reads only the files still in the spool's log, so
    everything up to ``archived`` is a backfill, for every stream.  ``late_operators``:
    for a new generation, at most this many operators over publication time (the
    cores: see ``roses_app.algebra.planner.late_groups.packed``)."""
    plan = GlobalPlan.of(streams) if plan is None else plan
    prints = {s.name: stream_fingerprint(s, namespaces) for s in streams}
    fresh_start = not (checkpoints / STATELESS_QUERY).exists()
    position = archived if fresh_start else ledger.position(STATELESS_QUERY)
    recorded = ledger.versions()
    published = {} if fresh_start else recorded
    stateless = tuple(plan.stateless_streams())
    new_stateless = tuple(s for s in stateless if published.get(s.name) != prints[s.name])
    kept, dropped = ([], []) if fresh_start else _existing(checkpoints, namespaces, prints)
    covered = {name for g in kept for name in g.live}
    rest = [s for s in plan.stateful_streams() if s.name not in covered]
    generations = list(kept)
    if rest:
        key = fingerprint(sorted((s.name, prints[s.name]) for s in rest))
        gen_id = GENERATION_PREFIX + key
        live = frozenset(s.name for s in rest)
        generations.append(Generation(gen_id, tuple(rest), live, position, True, late_operators))
    removed = tuple(sorted(name for name in recorded if name not in prints))
    return Layout(
        plan,
        stateless,
        prints,
        new_stateless,
        position,
        tuple(generations),
        tuple(dropped),
        removed,
    )


def _existing(
    checkpoints: Path, namespaces: Namespaces, prints: dict[str, str]
) -> tuple[list[Generation], list[str]]:
    kept: list[Generation] = []
    dropped: list[str] = []
    if not checkpoints.exists():
        return kept, dropped
    for folder in sorted(checkpoints.glob(GENERATION_PREFIX + "*")):
        saved = load_generation(folder)
        streams, boundary, late_operators = saved if saved is not None else ((), 0, 0)
        live = frozenset(
            s.name for s in streams if prints.get(s.name) == stream_fingerprint(s, namespaces)
        )
        if not live:
            dropped.append(folder.name)
            continue
        kept.append(Generation(folder.name, streams, live, boundary, False, late_operators))
    return kept, dropped


# Spark writes each file of a checkpoint's logs as ``.NAME.UUID.tmp`` (and its
# ``.crc``), then renames it.  A process killed in between leaves that file behind,
# and Spark 4 then refuses to start the query on batch 0
# (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY): offsets/ is not empty.
UNFINISHED_WRITE = re.compile(r"^\.\.?.+\.[0-9a-f-]{36}\.tmp(\.crc)?$")


def clear_unfinished_writes(checkpoint: Path) -> list[Path]:
    """Remove the temporary files a killed process left in ``checkpoint``'s metadata
    and logs (never its state store), before the query starts on it; returns them.
    Only while no query runs on it: the data folder's lock makes sure of that."""
    folders = [checkpoint, checkpoint / "offsets", checkpoint / "commits"]
    folders += sorted((checkpoint / "sources").glob("*"))
    left = [
        path
        for folder in folders
        if folder.is_dir()
        for path in folder.iterdir()
        if UNFINISHED_WRITE.match(path.name) and path.is_file()
    ]
    for path in left:
        log.warning("checkpoint %s: removing %s, a write cut short", checkpoint.name, path)
        path.unlink(missing_ok=True)
    return left


def remove_query(checkpoints: Path, query_id: str) -> None:
    log.info("dropping query %s: no stream of the config needs it any more", query_id)
    shutil.rmtree(checkpoints / query_id, ignore_errors=True)
