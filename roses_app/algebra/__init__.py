"""The ROSES logical algebra: plan nodes that describe, never execute.

Importing this package loads neither pyspark nor lxml; the reference evaluator
(``roses_app.algebra.reference``) imports the XML functions lazily.
"""

from roses_app.algebra.plan import (
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
