"""The ROSES logical algebra: plans that describe, never execute, in four packages.

* :mod:`~roses_app.algebra.plan`: the logical plan's nodes and their values;
* :mod:`~roses_app.algebra.time`: the rules of time both engines share (over the plan);
* :mod:`~roses_app.algebra.planner`: rewrites, the global plan and what an engine
  needs of it, ``roses explain`` (over the plan and the rules of time);
* :mod:`~roses_app.algebra.reference`: the pure-Python reference engine, the oracle.

This module re-exports the plan's most used nodes.  Importing it loads neither pyspark
nor lxml; the reference engine imports the XML functions lazily.
"""

from roses_app.algebra.plan.operators import (
    NODE_TYPES,
    Filter,
    Map,
    Node,
    Origin,
    Source,
    Split,
    Stream,
    Union,
    XQuery,
)

__all__ = [
    "NODE_TYPES",
    "Filter",
    "Map",
    "Node",
    "Origin",
    "Source",
    "Split",
    "Stream",
    "Union",
    "XQuery",
]
