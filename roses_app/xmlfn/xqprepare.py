"""Preparing an XQuery mutator or reducer for Saxon-HE (``saxonche``): the process's
processor, the wrapper module of a query compiled and checked once per process, and
Saxon's error messages turned into ``FILE:LINE: message`` of the user's text.

:mod:`roses_app.xmlfn.xquery` runs what is prepared here.  Every call into Saxon holds
``lock``; one ``PySaxonProcessor`` is created lazily per process (a processor made
before a fork is replaced in the child).
"""

from __future__ import annotations

import os
import re
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roses_app.algebra.plan.operators import XQuery
from roses_app.errors import ExpressionError
from roses_app.xmlfn.xpath import Namespaces, namespace_map
from roses_app.xmlfn.xqsource import (
    BINDINGS,
    ROSES_NS,
    Module,
    Wrapper,
    build_wrapper,
    split_module,
)

BATCH_PARAM = f"{{{ROSES_NS}}}batch"


class XQueryError(ExpressionError):
    """A query that does not compile: ``str()`` is ``FILE:LINE: message``."""

    def __init__(self, file: str, line: int, detail: str) -> None:
        self.file = file
        self.line = line
        self.detail = detail
        super().__init__(f"{file}:{line}: {detail}")


# -- the processor -----------------------------------------------------------------------

lock = threading.RLock()
_saxon: dict[str, Any] = {"pid": None, "processor": None}

# The JDK's XML parser refuses a document with more than 100,000 characters from
# entity references (&lt; ...): a batch of items with escaped HTML has many more.
# These limits guard against entities declared in a DTD, which a batch cannot have
# (an item's DOCTYPE inside <batch> is not well-formed); the parser's limit on
# entity expansions (2,500) stays.
_PARSER_PROPERTY = "http://saxon.sf.net/feature/parserProperty?uri="
_UNLIMITED = tuple(
    f"http://www.oracle.com/xml/jaxp/properties/{name}"
    for name in ("maxGeneralEntitySizeLimit", "totalEntitySizeLimit")
)


def processor() -> Any:
    """The process's PySaxonProcessor (call with ``lock`` held)."""
    if _saxon["pid"] != os.getpid():
        from saxonche import PySaxonProcessor

        saxon = PySaxonProcessor(license=False)
        for name in _UNLIMITED:
            saxon.set_configuration_property(_PARSER_PROPERTY + urllib.parse.quote(name, ""), "0")
        _saxon["processor"] = saxon
        _saxon["pid"] = os.getpid()
        _prepared.clear()
    return _saxon["processor"]


# -- preparing a query -------------------------------------------------------------------


def kind_of(variables: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(map | combine | reduce, extra variables) for the variables a query gets."""
    names = tuple(variables)
    for kind in ("reduce", "combine", "map"):
        bound = [name for name, _ in BINDINGS[kind]]
        if all(name in names for name in bound):
            return kind, tuple(n for n in names if n not in bound)
    raise ValueError(f"no kind of XQuery function binds {names}")


def where_of(query: XQuery) -> str:
    return query.file or "inline XQuery"


def _file_line(query: XQuery, line: int) -> int:
    return query.line + line - 1


@dataclass
class Engine:
    """One wrapper of a query and the Saxon query processor that runs it."""

    wrapper: Wrapper
    xq: Any  # PyXQueryProcessor with the wrapper as its query


@dataclass
class Prepared:
    """A query ready to run: its fast wrapper, and the safe one once needed."""

    query: XQuery
    namespaces: Namespaces
    kind: str
    extra: tuple[str, ...]
    module: Module
    fast: Engine
    safe: Engine | None = None
    fallbacks: int = 0  # batches the fast wrapper failed on (then the safe one ran)

    @property
    def user_lines(self) -> int:
        return self.fast.wrapper.user_lines

    def user_line(self, wrapper_line: int | None) -> int:
        """The file line of a wrapper line (the query's last line past its end)."""
        if wrapper_line is None or wrapper_line < 1:
            wrapper_line = 1
        return _file_line(self.query, min(wrapper_line, self.user_lines))

    def engine(self, safe: bool) -> Engine:
        """(call with ``lock`` held)"""
        if not safe:
            return self.fast
        if self.safe is None:
            wrapper = build_wrapper(self.module, self.kind, self.extra, safe=True)
            self.safe = Engine(wrapper, _query_processor(self.query, self.namespaces, wrapper))
        return self.safe


_prepared: dict[tuple[XQuery, Namespaces, str, tuple[str, ...]], Prepared] = {}

RESULT_SHAPE = "the result must be one <item> element, or nothing (the item is dropped)"


def _static_problems(query: XQuery, module: Module, kind: str, extra: tuple[str, ...]) -> None:
    bound = {name for name, _ in BINDINGS[kind]}
    where = where_of(query)
    for st in module.statements:
        line = _file_line(query, module.line_of(st.start))
        if st.kind == "library":
            raise XQueryError(where, line, "a mutator must be a main module, not a library module")
        if st.kind == "variable" and st.name in bound:
            raise XQueryError(
                where, line, f"${st.name} is bound by ROSES: declare it external or leave it out"
            )
        if st.kind == "external" and st.name not in bound | set(extra) and not st.default:
            names = ", ".join(f"${n}" for n in (*sorted(bound), *extra))
            raise XQueryError(
                where,
                line,
                f"external variable ${st.name} gets no value here (ROSES binds {names}); "
                "give it a default (external := ...) or remove it",
            )


def _query_processor(query: XQuery, namespaces: Namespaces, wrapper: Wrapper) -> Any:
    xq = processor().new_xquery_processor()
    for prefix, uri in namespace_map(namespaces).items():
        xq.declare_namespace(prefix, uri)
    if query.file and Path(query.file).exists():
        xq.set_query_base_uri(Path(query.file).resolve().as_uri())
    xq.set_query_content(wrapper.text)
    return xq


def prepare(query: XQuery, namespaces: Namespaces, kind: str, extra: tuple[str, ...]) -> Prepared:
    """The compiled-and-checked wrapper of ``query`` (call with ``lock`` held)."""
    processor()  # a new process forgets what its parent prepared
    key = (query, namespaces, kind, extra)
    prepared = _prepared.get(key)
    if prepared is not None:
        return prepared
    module = split_module(query.text)
    _static_problems(query, module, kind, extra)
    wrapper = build_wrapper(module, kind, extra)
    engine = Engine(wrapper, _query_processor(query, namespaces, wrapper))
    prepared = Prepared(query, namespaces, kind, extra, module, engine)
    _compile(prepared)
    _prepared[key] = prepared
    return prepared


_SAXON_WHERE = re.compile(r"on line (\d+)(?:,? (?:at )?column (\d+))?")
_SAXON_KIND = re.compile(r"\s*((?:[A-Z]\w* )?error)\b", re.I)
# The wrapper's own text, which Saxon may quote in a message about the user's text.
_WRAPPER_TEXT = re.compile(
    r"\s*\)*\s*(?:treat as element\(|return if \(count\(|as element\(Q\{\}item).*?"
    r"(?=\s+does not match|\s*$)"
)


def saxon_message(text: str, wrapper: Wrapper | None = None) -> tuple[int | None, str]:
    """(wrapper line, "Kind error: CODE message (column N)") of a Saxon error message."""
    first, _, rest = text.strip().partition("\n")
    match = _SAXON_WHERE.search(first)
    kind_match = _SAXON_KIND.match(first)
    kind = kind_match.group(1) if kind_match else ""
    detail = " ".join(rest.split()) or " ".join(first.split())
    detail = _WRAPPER_TEXT.sub(" (end of the query)", detail)
    detail = detail.replace(f"Q{{{ROSES_NS}}}", "")
    line = int(match.group(1)) if match else None
    if match and match.group(2) and line is not None:
        column = int(match.group(2))
        if wrapper is not None:
            line, column = wrapper.user_position(line, column)
        if wrapper is None or line <= wrapper.user_lines:
            detail += f" (column {column})"
    return line, f"{kind}: {detail}" if kind else detail


def _compile(prepared: Prepared) -> None:
    """Compile the wrapper (by running it on an empty batch); raise XQueryError if bad."""
    from saxonche import PySaxonApiError

    saxon = processor()
    xq = prepared.fast.xq
    xq.set_parameter(BATCH_PARAM, saxon.parse_xml(xml_text="<batch/>"))
    for name in prepared.extra:
        xq.set_parameter(name, saxon.make_string_value(""))
    try:
        xq.run_query_to_string()
    except PySaxonApiError as exc:
        line, detail = saxon_message(str(exc), prepared.fast.wrapper)
        if "cannot be cast to" in detail:  # Saxon's own failure on a constant result
            line, detail = None, f"{RESULT_SHAPE} (Saxon: {detail})"
        if line is None:
            line = _line_of_function(prepared.module, detail)
        raise XQueryError(where_of(prepared.query), prepared.user_line(line), detail) from None


_UNKNOWN_FUNCTION = re.compile(r"function named (?:Q\{[^}]*\})?([\w.\-]+)\(\)")


def _line_of_function(module: Module, detail: str) -> int | None:
    """Saxon gives no line for an unknown function: find its first call."""
    match = _UNKNOWN_FUNCTION.search(detail)
    if match is None:
        return None
    call = re.search(
        r"(?<![\w.\-])(?:[\w.\-]+:)?" + re.escape(match.group(1)) + r"\s*\(", module.masked
    )
    return module.line_of(call.start()) if call else None


def check_xquery(
    query: XQuery, namespaces: Namespaces = (), variables: Sequence[str] = ("i",)
) -> None:
    """Raise XQueryError (an ExpressionError) ``FILE:LINE: message`` if ``query`` is bad.

    ``variables``: ``("i",)`` for a map, ``("i1", "i2")`` for a join's combine,
    ``("items", ...)`` for a reducer (further names are extra string variables).
    """
    kind, extra = kind_of(variables)
    with lock:
        prepare(query, namespaces, kind, extra)
