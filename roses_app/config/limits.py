"""The size limits of a feeds.yaml, in one place (docs/operating.md, "Limits of a config",
states them).

They bound what a config costs, not how many streams it has: reading a config and
planning its streams is linear in what is written, so what could run away is what a
few bytes can stand for.  YAML aliases let a few hundred bytes stand for billions of
values, and stream references let a few lines stand for a plan of 2^N paths; plans
stay DAGs (a stream used twice is one sub-plan), so what costs there is how deep
operators nest.  The bytes of the files bound everything else (a hundred thousand
keyword subscriptions are 15 MB of feeds.yaml, 12 MB of subscriptions file); the
YAML limits apply while the file is read, before anything is expanded.
"""

from __future__ import annotations

# Bytes of feeds.yaml, and of each subscriptions file it names (a config holds
# everything it reads in memory, plans included: about 4 kB per keyword subscription).
MAX_CONFIG_BYTES = 256 * 1024 * 1024
# Aliases (``*name``) written in the file.
MAX_YAML_ALIASES = 1_000
# Values (mappings, lists, scalars) the aliases of the file stand for, counted as if
# each alias were replaced by a copy of what it names (nested aliases included).
MAX_YAML_ALIAS_VALUES = 100_000
# Mappings and lists nested in one another.
MAX_YAML_DEPTH = 200
# Operators on the longest path from a stream's output down to a source, through
# the streams it uses by name.
MAX_PLAN_DEPTH = 100
# Characters of one XPath expression (an observer, an accessor, a key): elementpath
# parses and evaluates by recursion, and an expression of ten thousand characters
# may nest deeper than Python allows (370 terms joined by ``or``).
MAX_EXPRESSION_CHARS = 5_000
# Operators of time (and what reads them) that Spark runs for all stateful streams:
# Spark shares no sub-plan between the branches of a query: a stateful sub-plan read
# by k stateful operators runs k times (the stateless reads share one copy, see
# roses_app.algebra.planner.stateless_tails), and each copy costs Spark seconds of planning.
# Counted on the rewritten plans (``union: [x, x]`` is x).
MAX_STATEFUL_COPIES = 500
