"""XQuery 3.1 mutators and reducers run by Saxon-HE (``saxonche``), a whole batch per call.

A user's module (an ``xquery/*.xq`` file or inline text, see
:class:`~roses_app.algebra.plan.XQuery`) is rewritten once per process into a wrapper
module (:mod:`roses_app.xmlfn.xqsource`) that loops over a batch document
``<batch><u>ITEM...</u>...</batch>``: one unit per input item (map), per pair
(combine: ``$i1``, ``$i2``) or per group (reduce: ``$items``).  The batch document is
parsed once per call; the serialized result is cut into one piece per unit.

Each unit's result must be one ``<item>`` element (kept) or the empty sequence (λ:
dropped).  A dynamic error on one unit, or any other result, drops that unit only:
``on_error(xml, EvaluationError("FILE:LINE: ..."))`` is called (the default hook
logs a warning) and the result is None.  Nothing per item ever raises; a query that
does not compile raises :class:`XQueryError` (feeds.yaml is checked before anything
runs, so this means a bug).

Saxon writes results straight to its serializer, so ``try``/``catch`` cannot catch an
error raised once a unit's output has started (most errors inside an ``<item>``
constructor).  Such a batch fails as a whole and runs again with the *safe* wrapper,
which builds each result in memory first (about 15% slower); a query that keeps
failing that way uses the safe wrapper from then on.  Malformed items are found with
lxml and dropped; any other whole-batch failure is halved until the culprit is alone.

Saxon runs in-process (a GraalVM native image).  One ``PySaxonProcessor`` is created
lazily per process (Spark forks Python workers: a processor made before a fork is
replaced in the child) and every call into Saxon holds one lock, so threads may call
these functions concurrently (saxonche holds the GIL anyway: threads do not run Saxon
in parallel; processes do).  saxonche 13 has no compiled-query handle for XQuery: the
wrapper text and a configured query processor are cached per process, and Saxon
compiles the (small) wrapper once per batch call, about a millisecond.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lxml import etree

from roses_app.algebra.plan import XQuery
from roses_app.errors import EvaluationError, ExpressionError
from roses_app.xmlfn.batch import OnError, report
from roses_app.xmlfn.xpath import Namespaces, namespace_map
from roses_app.xmlfn.xqsource import (
    BINDINGS,
    ERROR_TAG,
    ROSES_NS,
    SEPARATOR,
    Module,
    Wrapper,
    build_wrapper,
    split_module,
)

log = logging.getLogger(__name__)

_BATCH_PARAM = f"{{{ROSES_NS}}}batch"
_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")


class XQueryError(ExpressionError):
    """A query that does not compile: ``str()`` is ``FILE:LINE: message``."""

    def __init__(self, file: str, line: int, detail: str) -> None:
        self.file = file
        self.line = line
        self.detail = detail
        super().__init__(f"{file}:{line}: {detail}")


# -- the processor -----------------------------------------------------------------------

_lock = threading.RLock()
_saxon: dict[str, Any] = {"pid": None, "processor": None}


def _processor() -> Any:
    """The process's PySaxonProcessor (call with ``_lock`` held)."""
    if _saxon["pid"] != os.getpid():
        from saxonche import PySaxonProcessor

        _saxon["processor"] = PySaxonProcessor(license=False)
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


def _where(query: XQuery) -> str:
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
        """(call with ``_lock`` held)"""
        if not safe:
            return self.fast
        if self.safe is None:
            wrapper = build_wrapper(self.module, self.kind, self.extra, safe=True)
            self.safe = Engine(wrapper, _query_processor(self.query, self.namespaces, wrapper))
        return self.safe


_prepared: dict[tuple[XQuery, Namespaces, str, tuple[str, ...]], Prepared] = {}


def _static_problems(query: XQuery, module: Module, kind: str, extra: tuple[str, ...]) -> None:
    bound = {name for name, _ in BINDINGS[kind]}
    where = _where(query)
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
    xq = _processor().new_xquery_processor()
    for prefix, uri in namespace_map(namespaces).items():
        xq.declare_namespace(prefix, uri)
    if query.file and Path(query.file).exists():
        xq.set_query_base_uri(Path(query.file).resolve().as_uri())
    xq.set_query_content(wrapper.text)
    return xq


def _prepare(query: XQuery, namespaces: Namespaces, kind: str, extra: tuple[str, ...]) -> Prepared:
    """The compiled-and-checked wrapper of ``query`` (call with ``_lock`` held)."""
    _processor()  # a new process forgets what its parent prepared
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


def _saxon_message(text: str, wrapper: Wrapper | None = None) -> tuple[int | None, str]:
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

    processor = _processor()
    xq = prepared.fast.xq
    xq.set_parameter(_BATCH_PARAM, processor.parse_xml(xml_text="<batch/>"))
    for name in prepared.extra:
        xq.set_parameter(name, processor.make_string_value(""))
    try:
        xq.run_query_to_string()
    except PySaxonApiError as exc:
        line, detail = _saxon_message(str(exc), prepared.fast.wrapper)
        if "cannot be cast to" in detail:  # Saxon's own failure on a constant result
            line, detail = None, f"{_RESULT_SHAPE} (Saxon: {detail})"
        if line is None:
            line = _line_of_function(prepared.module, detail)
        raise XQueryError(_where(prepared.query), prepared.user_line(line), detail) from None


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
    with _lock:
        _prepare(query, namespaces, kind, extra)


# -- running -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Unit:
    """One evaluation: the items bound, and the XML the error hook is given."""

    xml: str  # the unit element's serialization
    blame: str | None


def _strip(xml: str) -> str:
    return _XML_DECL.sub("", xml, count=1) if xml.startswith(("<?", " ", "\n")) else xml


def _run_units(
    prepared: Prepared,
    units: list[_Unit],
    extra_vars: Mapping[str, str],
    on_error: OnError | None,
    what: str,
) -> list[str | None]:
    """Evaluate ``units``: one call for all (or one per unit for a per-item wrapper)."""
    if prepared.fast.wrapper.per_item:
        return [r for u in units for r in _call(prepared, [u], extra_vars, on_error, what)]
    return _call(prepared, units, extra_vars, on_error, what)


def _call(
    prepared: Prepared,
    units: list[_Unit],
    extra_vars: Mapping[str, str],
    on_error: OnError | None,
    what: str,
    *,
    safe: bool = False,
) -> list[str | None]:
    """One Saxon call for ``units``.

    If the batch document does not parse, the units holding malformed items are
    dropped (found with lxml, which is quick and quiet) and the rest run again.  If
    the call fails as a whole otherwise (an error the per-unit ``try`` cannot catch),
    the batch runs again with the safe wrapper; if that fails too, it is halved until
    the culprit is alone.
    """
    from saxonche import PySaxonApiError

    if not units:
        return []
    safe = safe or prepared.fallbacks >= _FALLBACKS_BEFORE_SAFE
    text = "<batch>" + "".join(u.xml for u in units) + "</batch>"
    if len(text) - len(text.replace("&", "")) > _MAX_ENTITY_REFERENCES:
        text = _character_references(text)
    failure = ""
    with _lock:
        processor = _processor()
        engine = prepared.engine(safe)
        try:
            document = processor.parse_xml(xml_text=text)
        except PySaxonApiError as exc:
            failure = "not well-formed XML: " + " ".join(str(exc).split())
        else:
            engine.xq.set_parameter(_BATCH_PARAM, document)
            for name, value in extra_vars.items():
                engine.xq.set_parameter(name, processor.make_string_value(value))
            try:
                out = engine.xq.run_query_to_string()
            except PySaxonApiError as exc:
                line, failure = _saxon_message(str(exc), engine.wrapper)
                failure = f"{_where(prepared.query)}:{prepared.user_line(line)}: {failure}"
    if not failure:
        pieces = _strip(out).split(SEPARATOR)
        if len(pieces) == len(units) + 1:
            return [
                _result(prepared, piece, unit, on_error, what)
                for piece, unit in zip(pieces, units, strict=False)
            ]
        failure = f"{_where(prepared.query)}: unexpected output from Saxon"
    elif failure.startswith("not well-formed"):
        good = [_well_formed(u, on_error, what) for u in units]
        if not all(good):
            kept = [u for u, ok in zip(units, good, strict=True) if ok]
            results = iter(_call(prepared, kept, extra_vars, on_error, what, safe=safe))
            return [next(results) if ok else None for ok in good]
    if not safe:
        with _lock:
            prepared.fallbacks += 1
        return _call(prepared, units, extra_vars, on_error, what, safe=True)
    if len(units) > 1:
        half = len(units) // 2
        return [
            *_call(prepared, units[:half], extra_vars, on_error, what, safe=True),
            *_call(prepared, units[half:], extra_vars, on_error, what, safe=True),
        ]
    report(on_error, what, units[0].blame, EvaluationError(failure))
    return [None]


# A query whose items keep failing in a way the fast wrapper cannot catch (a dynamic
# error once the result has started: most errors inside an <item> constructor) runs
# with the safe wrapper from then on, instead of two calls per batch.
_FALLBACKS_BEFORE_SAFE = 3

# The JDK's XML parser refuses a document with more than 100,000 entity references
# (jdk.xml.maxGeneralEntitySizeLimit); character references do not count.
_MAX_ENTITY_REFERENCES = 90_000
_CHARACTER_REFERENCES = (("&lt;", "&#60;"), ("&amp;", "&#38;"), ("&gt;", "&#62;"))


def _character_references(text: str) -> str:
    for entity, reference in _CHARACTER_REFERENCES:
        text = text.replace(entity, reference)
    return text.replace("&quot;", "&#34;").replace("&apos;", "&#39;")


def _well_formed(unit: _Unit, on_error: OnError | None, what: str) -> bool:
    try:
        etree.fromstring(unit.xml)
    except etree.XMLSyntaxError as exc:
        report(on_error, what, unit.blame, exc)
        return False
    return True


def _result(
    prepared: Prepared, piece: str, unit: _Unit, on_error: OnError | None, what: str
) -> str | None:
    if not piece:
        return None
    if piece.startswith("<item"):
        return piece
    where = _where(prepared.query)
    try:
        marker = etree.fromstring(piece)
    except etree.XMLSyntaxError:
        marker = etree.Element("unknown")
    if marker.tag == _clark(ERROR_TAG):
        line = marker.get("line", "")
        number = int(line) if line.isdigit() else None
        code = marker.get("code", "").removeprefix("err:")
        description = marker.text or ""
        if _shape_error(prepared, code, number, description):
            detail = description.replace("Q{}item", "item")
            message = f"{where}:{prepared.query.line}: {_RESULT_SHAPE}: {detail}"
        else:
            message = f"{where}:{prepared.user_line(number)}: {code} {description}".rstrip()
    else:
        message = f"{where}: unexpected output from Saxon: {piece[:80]!r}"
    report(on_error, what, unit.blame, EvaluationError(message))
    return None


_RESULT_SHAPE = "the result must be one <item> element, or nothing (the item is dropped)"


def _shape_error(prepared: Prepared, code: str, line: int | None, description: str) -> bool:
    """Is this the wrapper's check of the result (rather than the user's own
    ``treat as``)?  Saxon gives the line where the checked expression starts."""
    ours = "treat as" in description or "the result has" in description
    if code != "XPDY0050" or not ours:
        return False
    own = "treat" in prepared.module.masked and line is not None and line <= prepared.user_lines
    return "Q{}item" in description or "the result has" in description or not own


def _clark(tag: str) -> str:
    return f"{{{ROSES_NS}}}{tag.split(':', 1)[1]}"


def _evaluate(
    query: XQuery,
    namespaces: Namespaces,
    kind: str,
    groups: Sequence[Sequence[str | None]],
    on_error: OnError | None,
    extra_vars: Mapping[str, str] | None = None,
    *,
    required: int = 0,
) -> list[str | None]:
    """Run ``query`` over units made of ``groups`` of items; see the module doc.

    A group whose first ``required`` items include a None is λ (None, no error).
    """
    extra = dict(extra_vars or {})
    with _lock:
        prepared = _prepare(query, namespaces, kind, tuple(sorted(extra)))
    what = f"{kind} {_where(query)}"
    results: list[str | None] = [None] * len(groups)
    units: list[_Unit] = []
    positions: list[int] = []
    for index, group in enumerate(groups):
        if any(x is None for x in group[:required]):
            continue
        items = [_strip(x) for x in group if x is not None]
        units.append(_Unit("<u>" + "".join(items) + "</u>", items[0] if items else None))
        positions.append(index)
    try:
        computed = _run_units(prepared, units, extra, on_error, what)
    except Exception as exc:  # not expected: never let one batch stop the stream
        log.exception("%s failed on a whole batch", what)
        for unit in units:
            report(on_error, what, unit.blame, exc)
        computed = [None] * len(units)
    for index, value in zip(positions, computed, strict=True):
        results[index] = value
    return results


def mutate_batch(
    query: XQuery,
    namespaces: Namespaces,
    xmls: Sequence[str | None],
    on_error: OnError | None = None,
) -> list[str | None]:
    """Map mutator (``$i``, also the context item) over a batch: one new item or None each."""
    return _evaluate(query, namespaces, "map", [(x,) for x in xmls], on_error, required=1)


def combine_batch(
    query: XQuery,
    namespaces: Namespaces,
    pairs: Sequence[tuple[str | None, str | None]],
    on_error: OnError | None = None,
) -> list[str | None]:
    """Combine of a join (``$i1``, ``$i2``) over a batch of pairs.

    A None ``$i1`` gives None; a None ``$i2`` is the empty sequence (outer joins).
    """
    return _evaluate(query, namespaces, "combine", pairs, on_error, required=1)


def reduce_batch(
    query: XQuery,
    namespaces: Namespaces,
    groups: Sequence[Sequence[str]],
    on_error: OnError | None = None,
    extra_vars: Mapping[str, str] | None = None,
) -> list[str | None]:
    """Reducer (``$items``) over a batch of groups: one item (or None) per group.

    ``extra_vars`` are bound as ``xs:string`` external variables for the whole call
    (e.g. a group key); the query may declare them ``external`` or just use them.
    """
    return _evaluate(query, namespaces, "reduce", groups, on_error, extra_vars)


@lru_cache(maxsize=1)
def saxon_version() -> str:
    with _lock:
        return str(_processor().version)
