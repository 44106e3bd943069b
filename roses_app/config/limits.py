"""The size limits of a feeds.yaml, in one place (the README's feeds.yaml section
states them).

They keep a small file from costing a lot: YAML aliases let a few hundred bytes
stand for billions of values, and stream references let a few lines stand for a
plan of 2^N paths.  Plans stay DAGs (a stream used twice is one sub-plan), so what
costs is the number of distinct operators and how deep they nest; the YAML limits
apply while the file is read, before anything is expanded.
"""

from __future__ import annotations

# Aliases (``*name``) written in the file.
MAX_YAML_ALIASES = 1_000
# Values (mappings, lists, scalars) the aliases of the file stand for, counted as if
# each alias were replaced by a copy of what it names (nested aliases included).
MAX_YAML_ALIAS_VALUES = 100_000
# Mappings and lists nested in one another.
MAX_YAML_DEPTH = 200
# Operators and source reads in the plans of all streams; a stream used by name in
# others counts once, an inline copy or an alias of its text counts again.
MAX_PLAN_NODES = 100_000
# Operators on the longest path from a stream's output down to a source, through
# the streams it uses by name.
MAX_PLAN_DEPTH = 100
# Operators of time (and what reads them) that Spark runs for all stateful streams:
# Spark shares no sub-plan between the branches of a query: a stateful sub-plan read
# by k stateful operators runs k times (the stateless reads share one copy, see
# roses_app.algebra.tails), and each copy costs Spark seconds of planning.
# Counted on the rewritten plans (``union: [x, x]`` is x).
MAX_STATEFUL_COPIES = 500
