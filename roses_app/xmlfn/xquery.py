"""XQuery 3.1 mutators and reducers run by Saxon-HE (``saxonche``), a whole batch per call.

A user's module (an ``xquery/*.xq`` file or inline text, see
:class:`~roses_app.algebra.plan.operators.XQuery`) is rewritten once per process into a wrapper
module (:mod:`roses_app.xmlfn.xqsource`, compiled and checked by
:mod:`roses_app.xmlfn.xqprepare`) that loops over a batch document
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

Where the time goes, for items of about 650 bytes and a mutator that copies the item
and adds an element: Saxon parses the batch in about 14 µs an item and evaluates and
serializes in about 15 (moving the text into and out of the native image is about 3 µs
each way); Python adds about 1 µs.  So one process does some 30,000 items/s, and the
query's own work comes on top.  ``ROSES_XQUERY_PROCESSES`` lets helper processes take
shares of large batches on other cores (:mod:`roses_app.xmlfn.xqpool`).

Saxon runs in-process (a GraalVM native image), one processor per process; every
call into Saxon holds one lock, so threads may call these functions concurrently
(saxonche holds the GIL anyway: threads do not run Saxon in parallel; processes do).
saxonche 13 has no compiled-query handle for XQuery: the wrapper text and a configured
query processor are cached per process, and Saxon compiles the (small) wrapper once
per batch call, about a millisecond.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from lxml import etree

from roses_app.algebra.plan.operators import XQuery
from roses_app.errors import EvaluationError
from roses_app.xmlfn import budget, xqguard, xqpool
from roses_app.xmlfn.batch import OnError, report
from roses_app.xmlfn.xpath import Namespaces
from roses_app.xmlfn.xqprepare import (
    BATCH_PARAM,
    RESULT_SHAPE,
    Prepared,
    XQueryError,
    check_xquery,
    lock,
    prepare,
    processor,
    saxon_message,
    where_of,
)
from roses_app.xmlfn.xqsource import ERROR_TAG, ROSES_NS, SEPARATOR

log = logging.getLogger(__name__)

_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")


# -- running -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Units:
    """Evaluations: the items each binds (serialized, without the ``<u>`` wrapper) and
    the XML the error hook gets for each.  Two lists rather than one object per unit:
    this is the per-item cost Python adds to every batch."""

    inner: list[str]
    blame: list[str | None]

    def __len__(self) -> int:
        return len(self.inner)

    def part(self, start: int, stop: int | None = None) -> _Units:
        return _Units(self.inner[start:stop], self.blame[start:stop])

    def text(self) -> str:
        return "<batch><u>" + "</u><u>".join(self.inner) + "</u></batch>"


_DECLARED = ("<?", " ", "\n", "\r", "\t")


def _strip(xml: str) -> str:
    """``xml`` without its XML declaration (which cannot be inside the batch document)."""
    return _XML_DECL.sub("", xml, count=1) if xml.startswith(_DECLARED) else xml


def _run_units(
    prepared: Prepared,
    units: _Units,
    extra_vars: Mapping[str, str],
    on_error: OnError | None,
    what: str,
) -> list[str | None]:
    """Evaluate ``units``: one call for all (or one per unit for a per-item wrapper)."""
    if prepared.fast.wrapper.per_item:
        return [
            r
            for k in range(len(units))
            for r in _call(prepared, units.part(k, k + 1), extra_vars, on_error, what)
        ]
    return _call(prepared, units, extra_vars, on_error, what)


def _call(
    prepared: Prepared,
    units: _Units,
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
    text = units.text()
    failure = ""
    with lock:
        saxon = processor()
        engine = prepared.engine(safe)
        try:
            document = saxon.parse_xml(xml_text=text)
        except PySaxonApiError as exc:
            failure = "not well-formed XML: " + " ".join(str(exc).split())
        else:
            engine.xq.set_parameter(BATCH_PARAM, document)
            for name, value in extra_vars.items():
                engine.xq.set_parameter(name, saxon.make_string_value(value))
            try:
                out = engine.xq.run_query_to_string()
            except PySaxonApiError as exc:
                line, failure = saxon_message(str(exc), engine.wrapper)
                failure = f"{where_of(prepared.query)}:{prepared.user_line(line)}: {failure}"
            # Saxon's tree of the batch is large: let it go before the next batch
            engine.xq.remove_parameter(BATCH_PARAM)
            del document
    if not failure:
        pieces = _strip(out).split(SEPARATOR)
        if len(pieces) == len(units) + 1:
            return _results(prepared, pieces, units, on_error, what)
        failure = f"{where_of(prepared.query)}: unexpected output from Saxon"
    elif failure.startswith("not well-formed"):
        pairs = zip(units.inner, units.blame, strict=True)
        good = [_well_formed(inner, blame, on_error, what) for inner, blame in pairs]
        if not all(good):
            kept = _Units(
                [u for u, ok in zip(units.inner, good, strict=True) if ok],
                [b for b, ok in zip(units.blame, good, strict=True) if ok],
            )
            results = iter(_call(prepared, kept, extra_vars, on_error, what, safe=safe))
            return [next(results) if ok else None for ok in good]
    if not safe:
        with lock:
            prepared.fallbacks += 1
        return _call(prepared, units, extra_vars, on_error, what, safe=True)
    if len(units) > 1:
        half = len(units) // 2
        return [
            *_call(prepared, units.part(0, half), extra_vars, on_error, what, safe=True),
            *_call(prepared, units.part(half), extra_vars, on_error, what, safe=True),
        ]
    report(on_error, what, units.blame[0], EvaluationError(failure))
    return [None]


def _results(
    prepared: Prepared, pieces: list[str], units: _Units, on_error: OnError | None, what: str
) -> list[str | None]:
    """One result per unit from Saxon's output cut at the separators (the last piece,
    after the last separator, is empty)."""
    del pieces[-1]
    results: list[str | None] = [p if p.startswith("<item") else None for p in pieces]
    # Counted in C: a second pass over the pieces only when there are error markers.
    if len(results) - results.count(None) != len(pieces) - pieces.count(""):
        for k, piece in enumerate(pieces):
            if piece and results[k] is None:
                _marker(prepared, piece, units.blame[k], on_error, what)
    return results


# A query whose items keep failing in a way the fast wrapper cannot catch (a dynamic
# error once the result has started: most errors inside an <item> constructor) runs
# with the safe wrapper from then on, instead of two calls per batch.
_FALLBACKS_BEFORE_SAFE = 3


def _well_formed(inner: str, blame: str | None, on_error: OnError | None, what: str) -> bool:
    try:
        etree.fromstring("<u>" + inner + "</u>")
    except etree.XMLSyntaxError as exc:
        report(on_error, what, blame, exc)
        return False
    return True


def _marker(
    prepared: Prepared, piece: str, blame: str | None, on_error: OnError | None, what: str
) -> None:
    """Report the error marker (or other unexpected output) Saxon gave for a unit."""
    where = where_of(prepared.query)
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
            message = f"{where}:{prepared.query.line}: {RESULT_SHAPE}: {detail}"
        else:
            message = f"{where}:{prepared.user_line(number)}: {code} {description}".rstrip()
    else:
        message = f"{where}: unexpected output from Saxon: {piece[:80]!r}"
    report(on_error, what, blame, EvaluationError(message))


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


def _run_shared(
    prepared: Prepared,
    units: _Units,
    extra_vars: Mapping[str, str],
    on_error: OnError | None,
    what: str,
) -> list[str | None]:
    """``_run_units``, with shares of a large batch sent to helper processes (if
    ``ROSES_XQUERY_PROCESSES`` asks for them) while this process runs the first."""
    helpers = xqpool.take(len(units))
    if not helpers:
        return _run_units(prepared, units, extra_vars, on_error, what)
    size = -(-len(units) // (len(helpers) + 1))
    shares: list[tuple[xqpool.Helper | None, _Units]] = []
    for k, helper in enumerate(helpers, start=1):
        share = units.part(k * size, (k + 1) * size)
        request = (prepared.query, prepared.namespaces, prepared.kind, dict(extra_vars))
        sent = helper.submit((*request, share.inner, share.blame))
        shares.append((helper if sent else None, share))
    try:
        results = _run_units(prepared, units.part(0, size), extra_vars, on_error, what)
    finally:  # even if that failed: every reply is read, every helper released
        replies = [taken.result() if taken is not None else None for taken, _ in shares]
    for reply, (_, share) in zip(replies, shares, strict=True):
        if reply is None or len(reply[0]) != len(share):  # gone or failed: run it here
            results += _run_units(prepared, share, extra_vars, on_error, what)
            continue
        computed, dropped = reply
        for xml, exc in dropped:
            report(on_error, what, xml, exc)
        results += computed
    return results


def load_saxon() -> None:
    """Start this process's Saxon (a helper does before it says it is ready)."""
    with lock:
        processor()


def serve_share(request: tuple[Any, ...]) -> xqpool.Reply:
    """A helper process's evaluation of one share sent by ``_run_shared``."""
    query, namespaces, kind, extra_vars, inner, blame = request
    with lock:
        prepared = prepare(query, namespaces, kind, tuple(sorted(extra_vars)))
    dropped: list[tuple[str | None, Exception]] = []

    def keep(xml: str | None, exc: Exception) -> None:
        dropped.append((xml, exc))

    what = f"{kind} {where_of(query)}"
    results = _run_units(prepared, _Units(inner, blame), extra_vars, keep, what)
    return results, dropped


def _map_units(xmls: Sequence[str | None]) -> tuple[_Units, list[int]]:
    """One unit per item that is not None, and the items' positions."""
    inner = [_strip(x) if x.startswith(_DECLARED) else x for x in xmls if x is not None]
    if len(inner) == len(xmls):
        positions = list(range(len(xmls)))
    else:
        positions = [index for index, xml in enumerate(xmls) if xml is not None]
    return _Units(inner, list(inner)), positions


def _group_units(groups: Sequence[Sequence[str | None]], required: int) -> tuple[_Units, list[int]]:
    """One unit per group whose first ``required`` items are all there (else λ)."""
    units = _Units([], [])
    positions: list[int] = []
    for index, group in enumerate(groups):
        if any(x is None for x in group[:required]):
            continue
        items = [_strip(x) for x in group if x is not None]
        units.inner.append("".join(items))
        units.blame.append(items[0] if items else None)
        positions.append(index)
    return units, positions


def _evaluate(
    query: XQuery,
    namespaces: Namespaces,
    kind: str,
    count: int,
    units: _Units,
    positions: list[int],
    on_error: OnError | None,
    extra_vars: Mapping[str, str] | None = None,
) -> list[str | None]:
    """Run ``query`` over ``units`` (at ``positions`` of ``count`` inputs); see the
    module doc.  Inputs without a unit give None."""
    extra = dict(extra_vars or {})
    with lock:  # raises XQueryError here if the query does not compile
        prepared = prepare(query, namespaces, kind, tuple(sorted(extra)))
    what = f"{kind} {where_of(query)}"
    seconds = budget.limit()
    guarded = None
    if seconds is not None and units:  # Saxon in a helper killed past its deadline
        request = xqguard.Request(query, namespaces, kind, extra, what)
        guarded = xqguard.run(request, units.inner, units.blame, on_error, seconds)
    try:
        computed = (
            guarded if guarded is not None else _run_shared(prepared, units, extra, on_error, what)
        )
    except Exception as exc:  # not expected: never let one batch stop the stream
        log.exception("%s failed on a whole batch", what)
        for blame in units.blame:
            report(on_error, what, blame, exc)
        computed = [None] * len(units)
    if len(computed) == count:
        return computed
    results: list[str | None] = [None] * count
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
    units, positions = _map_units(xmls)
    return _evaluate(query, namespaces, "map", len(xmls), units, positions, on_error)


def combine_batch(
    query: XQuery,
    namespaces: Namespaces,
    pairs: Sequence[tuple[str | None, str | None]],
    on_error: OnError | None = None,
) -> list[str | None]:
    """Combine of a join (``$i1``, ``$i2``) over a batch of pairs.

    A None ``$i1`` gives None; a None ``$i2`` is the empty sequence (outer joins).
    """
    units, positions = _group_units(pairs, 1)
    return _evaluate(query, namespaces, "combine", len(pairs), units, positions, on_error)


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
    units, positions = _group_units(groups, 0)
    return _evaluate(
        query, namespaces, "reduce", len(groups), units, positions, on_error, extra_vars
    )


@lru_cache(maxsize=1)
def saxon_version() -> str:
    with lock:
        return str(processor().version)


__all__ = ["XQueryError", "check_xquery", "combine_batch", "mutate_batch", "reduce_batch"]
