"""The seed's item functions: observers, accessors and split functions in XPath 3.1,
mutators and reducers in XQuery 3.1.

* :mod:`~roses_app.xmlfn.xpath`: XPath 3.1 through elementpath (compile, evaluate,
  shape results into items or split names);
* :mod:`~roses_app.xmlfn.fastpath`: which expressions may run on lxml's C XPath 1.0
  engine instead, because they give the same result there;
* :mod:`~roses_app.xmlfn.batch`: the batch functions the Spark UDFs and the reference
  evaluator call (one call per batch), with the per-item error hook;
* :mod:`~roses_app.xmlfn.xqsource`, :mod:`~roses_app.xmlfn.xqprepare` and
  :mod:`~roses_app.xmlfn.xquery`: XQuery mutators run by Saxon-HE over a whole batch
  per call; :mod:`~roses_app.xmlfn.xqpool` spreads big batches over helper processes
  (``ROSES_XQUERY_PROCESSES``, off by default: Spark already runs a worker per core);
* :mod:`~roses_app.xmlfn.keys` (equi-join key values) and
  :mod:`~roses_app.xmlfn.stamp` (window stamps, nest/unnest, the built-in composition):
  the items both engines build the same way.

This package imports lxml and elementpath; saxonche is loaded on the first XQuery call.
"""

from __future__ import annotations

from roses_app.xmlfn.batch import (
    OnError,
    filter_batch,
    guid_note,
    logging_hook,
    map_batch,
    observe2_batch,
    split_batch,
)
from roses_app.xmlfn.fastpath import uses_fast_path, why_not_fast
from roses_app.xmlfn.xpath import (
    ITEM_VARIABLES,
    PAIR_VARIABLES,
    SEQUENCE_VARIABLES,
    CompiledXPath,
    Namespaces,
    check_xpath,
    compile_xpath,
    namespace_map,
    split_name,
    to_item,
)
from roses_app.xmlfn.xquery import (
    XQueryError,
    check_xquery,
    combine_batch,
    mutate_batch,
    reduce_batch,
)

__all__ = [
    "ITEM_VARIABLES",
    "PAIR_VARIABLES",
    "SEQUENCE_VARIABLES",
    "CompiledXPath",
    "Namespaces",
    "OnError",
    "XQueryError",
    "check_xpath",
    "check_xquery",
    "combine_batch",
    "compile_xpath",
    "filter_batch",
    "guid_note",
    "logging_hook",
    "map_batch",
    "mutate_batch",
    "namespace_map",
    "observe2_batch",
    "reduce_batch",
    "split_batch",
    "split_name",
    "to_item",
    "uses_fast_path",
    "why_not_fast",
]
