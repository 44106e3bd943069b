"""A fused stateless program compiled for a worker: its item functions (each compiled
at its first use) and presearchers, kept per program (:func:`compiled`) for
:mod:`roses_app.xmlfn.fused`'s runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree

from roses_app.algebra.planner.program import Program
from roses_app.heap import building_long_lived
from roses_app.xmlfn.batch import accessor_fn, observer_fn, splitter_fn
from roses_app.xmlfn.xpath import Namespaces

if TYPE_CHECKING:
    from roses_app.xmlfn.presearch import Presearcher

ItemFunction = Callable[[etree._Element], Any]


class LazyFunctions(dict[int, ItemFunction]):
    """Step -> its item function, compiled at its first use: the presearcher decides
    most filters exactly, and compiling ten thousand observers nobody evaluates cost
    seconds in every worker process."""

    def __init__(self) -> None:
        super().__init__()
        # step -> (the maker of its function, the expression): a tuple, not a
        # partial, per step (a hundred thousand filters: 23 MB in each worker)
        self.makers: dict[int, tuple[Callable[[str, Namespaces], Any], str]] = {}
        self.namespaces: Namespaces = ()

    def __missing__(self, step: int) -> ItemFunction:
        make, expr = self.makers[step]
        made = self[step] = make(expr, self.namespaces)
        return made


@dataclass
class Compiled:
    """A program's functions, compiled once per worker process."""

    program: Program
    functions: LazyFunctions = field(default_factory=LazyFunctions)
    presearchers: dict[int, Presearcher[int]] = field(default_factory=dict)
    # a step read by filters with a presearcher -> those filters
    searched: dict[int, list[int]] = field(default_factory=dict)
    sources: dict[str, list[int]] = field(default_factory=dict)
    # filters reading a source or a union of sources (the items as they came): one
    # presearcher for all of them, each with the sources its input holds
    raw: Presearcher[int] | None = None
    raw_sources: dict[int, frozenset[str]] = field(default_factory=dict)
    # the sources some of those filters hold: the items of the others are not matched
    # (one subscription to one source of five: four fifths of the scans were for nothing)
    raw_held: frozenset[str] = frozenset()
    # unions whose items no step reads (only filters of ``raw``, which take the loaded
    # items): not computed (subscriptions to unions of sources built a dict per item
    # and union that nothing read)
    unread: frozenset[int] = frozenset()
    # those filters that are a program output read by no step -> that output's index:
    # an item the presearcher accepts goes straight to the output (ten thousand
    # subscriptions: no per-filter dict of rows is built and read back)
    direct: dict[int, int] = field(default_factory=dict)


_cache: dict[str, Compiled] = {}
_cache_lock = threading.Lock()


def shipped_analyses(program: Program) -> bytes:
    """The analyses of the program's observers, made while feeds.yaml was read, as
    bytes a worker hands to ``presearch_terms.remember`` before :func:`compiled`: no
    worker parses them."""
    from roses_app.xmlfn.presearch_terms import shipped

    observers = (step.arg for step in program.steps if step.kind == "filter")
    return shipped(observers, program.namespaces)


def compiled(program: Program, *, presearch: bool = True) -> Compiled:
    key = f"{program.key}/{presearch}"
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            # long-lived objects and no cycles: collections during the build walked them
            # again and again (10,000 observers: 1.3-1.6 s -> 0.7-0.8 s), and frozen
            # after it without the full collection, which walked them once more
            # (100,000 observers: 1 s of each worker's 6)
            with building_long_lived():
                found = _cache[key] = _compile(program, presearch)
        return found


def _compile(program: Program, presearch: bool) -> Compiled:
    out = Compiled(program)
    ns = program.namespaces
    readers: dict[int, list[int]] = {}
    pure = _pure_steps(program)
    makers = out.functions.makers
    out.functions.namespaces = ns
    for n, step in enumerate(program.steps):
        if step.kind == "source":
            out.sources.setdefault(step.arg, []).append(n)
        elif step.kind == "filter":
            makers[n] = (observer_fn, step.arg)
            if step.inputs[0] in pure:
                out.raw_sources[n] = pure[step.inputs[0]]
            else:
                readers.setdefault(step.inputs[0], []).append(n)
        elif step.kind == "map" and step.xquery is None:
            makers[n] = (accessor_fn, step.arg)
        elif step.kind == "split":
            makers[n] = (splitter_fn, step.arg)
    if presearch:
        from roses_app.xmlfn.presearch import Presearcher

        out.direct = _direct_outputs(program, out.raw_sources)
        if out.raw_sources:
            out.raw = Presearcher({f: program.steps[f].arg for f in out.raw_sources}, ns)
            out.unread = _unread_unions(program, frozenset(out.raw_sources))
            out.raw_held = frozenset().union(*out.raw_sources.values())
        for read, filters in readers.items():
            out.presearchers[read] = Presearcher({f: program.steps[f].arg for f in filters}, ns)
            out.searched[read] = filters
    return out


def _direct_outputs(program: Program, raw: dict[int, frozenset[str]]) -> dict[int, int]:
    """The filters of ``raw`` that are one program output and read by no step, with
    the index of that output."""
    read = {i for step in program.steps for i in step.inputs}
    at: dict[int, list[int]] = {}
    for index, (n, _) in enumerate(program.outputs):
        at.setdefault(n, []).append(index)
    return {n: at[n][0] for n in raw if n not in read and len(at.get(n, ())) == 1}


def _unread_unions(program: Program, raw: frozenset[int]) -> frozenset[int]:
    """The union steps that are no output and whose readers are all filters of
    ``raw`` or such unions (steps come after the steps they read)."""
    readers: dict[int, list[int]] = {}
    for n, step in enumerate(program.steps):
        for read in step.inputs:
            readers.setdefault(read, []).append(n)
    outputs = {n for n, _ in program.outputs}
    unread: set[int] = set()
    for n in reversed(range(len(program.steps))):
        mine = readers.get(n, [])
        union = program.steps[n].kind == "union" and n not in outputs and mine
        if union and all(r in raw or r in unread for r in mine):
            unread.add(n)
    return frozenset(unread)


def _pure_steps(program: Program) -> dict[int, frozenset[str]]:
    """The steps whose items are the input items as they came (a source, a union of
    such steps), with their sources: an item reaching several of them is one tree, so
    one presearch of it serves the filters of all (a subscription per source or union
    of sources would otherwise scan each item once per union it is in)."""
    pure: dict[int, frozenset[str]] = {}
    for n, step in enumerate(program.steps):
        if step.kind == "source" and step.time == "ingest":  # the loaded item as it is
            pure[n] = frozenset([step.arg])
        elif step.kind == "union" and all(i in pure for i in step.inputs):
            pure[n] = frozenset().union(*(pure[i] for i in step.inputs))
    return pure
