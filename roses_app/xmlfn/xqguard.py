"""XQuery under the per-item time limit (``settings.limits.item_seconds``).

Saxon is native code that holds the GIL for a whole call: no signal handler, no other
thread runs until it returns, so an in-process call cannot be bounded.  With a limit,
a process's XQuery batches therefore run in one helper process (the
:mod:`~roses_app.xmlfn.xqpool` kind, its own Saxon), which is killed when a request
runs past its deadline.  A batch goes in chunks of at most :data:`CHUNK_UNITS` units;
a chunk's deadline is the item limit plus an allowance per unit (a few times the time
a unit has taken so far, at least :data:`MIN_UNIT_SECONDS`).  A chunk past it is cut
into :data:`SPLIT` parts that run again, each with its own deadline, until the unit
that runs away is alone: it is dropped (:class:`~roses_app.errors.ItemTimeout` to the
error hook) and its neighbours are kept.  One such unit costs its partition a few
times the limit (a chunk of 1,000 units: three or four deadlines).  A unit whose
evaluation ends the helper (Saxon running out of memory under the worker's
``RLIMIT_DATA``, which the helper inherits) is found and dropped the same way.
The next request starts a new helper.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from roses_app.algebra.plan.operators import XQuery
from roses_app.errors import EvaluationError, StepStruck
from roses_app.xmlfn import budget, xqpool
from roses_app.xmlfn.batch import OnError, report
from roses_app.xmlfn.xpath import Namespaces

log = logging.getLogger(__name__)

CHUNK_UNITS = 1000  # units per request
SPLIT = 16  # parts of a chunk that ran past its deadline
MIN_UNIT_SECONDS = 0.002  # the least a deadline allows per unit
START_SECONDS = 120.0  # how long a helper may take to load Saxon


@dataclass(frozen=True)
class Request:
    """What every request of one batch shares (see ``xquery.serve_share``)."""

    query: XQuery
    namespaces: Namespaces
    kind: str
    extra_vars: Mapping[str, str]
    what: str


class _Guard:
    """This process's helper, and what a unit has cost (for the deadlines)."""

    def __init__(self) -> None:
        self.helper: xqpool.Helper | None = None
        self.lock = threading.Lock()
        self.unit_seconds = MIN_UNIT_SECONDS / 4
        # the helper's standard error: Saxon's last words when it dies are pages of
        # its heap's chunks; the log gets the line that says why
        self.stderr: IO[bytes] | None = None

    def deadline(self, units: int, seconds: float) -> float:
        return seconds + units * max(MIN_UNIT_SECONDS, 4 * self.unit_seconds)

    def ready(self) -> xqpool.Helper:
        """The helper, started (and Saxon loaded) if need be; OSError if it cannot."""
        helper = self.helper
        if helper is not None and helper.alive():
            return helper
        if helper is not None:
            self.discard()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (open while the helper runs)
        helper = xqpool.start_helper(self.stderr)
        if not helper.replies.poll(START_SECONDS) or helper.replies.recv() != "ready":
            helper.process.kill()
            helper.close()
            raise OSError(f"the XQuery helper did not start within {START_SECONDS:g} s")
        self.helper = helper
        return helper

    def discard(self) -> str:
        """Kill the helper (it ran past a deadline, or is gone); how it ended."""
        helper, self.helper = self.helper, None
        ended = ""
        if helper is not None:
            helper.process.kill()
            code = helper.process.wait()
            helper.close()
            ended = f"exit status {code}"
        if self.stderr is not None:
            ended = _last_words(self.stderr) or ended
            self.stderr.close()
            self.stderr = None
        return ended


def _last_words(stderr: IO[bytes]) -> str:
    """The helper's line that says why it failed (Saxon's "Fatal error: ..."), else
    its last one; the rest is logged at debug level."""
    stderr.seek(0)
    lines = stderr.read().decode("utf-8", "replace").splitlines()
    if lines:
        log.debug("the XQuery helper's standard error:\n%s", "\n".join(lines))
    fatal = [line for line in lines if "error" in line.lower()]
    return (fatal or lines or [""])[-1].strip()[:300]


_guard = _Guard()


def _forget_after_fork() -> None:
    global _guard
    _guard = _Guard()  # a forked child starts its own helper (and lock)


os.register_at_fork(after_in_child=_forget_after_fork)


def run(
    request: Request,
    inner: list[str],
    blame: list[str | None],
    on_error: OnError | None,
    seconds: float,
) -> list[str | None] | None:
    """One result per unit (None: dropped, reported to ``on_error``), evaluated by the
    helper within the deadlines of the module doc; None if no helper can start (the
    caller evaluates the batch itself, without a time limit)."""
    try:
        with _guard.lock:
            _guard.ready()
    except OSError as exc:
        log.warning("XQuery runs without a time limit: %s", exc)
        return None
    results: list[str | None] = []
    bounds = _Bounds(on_error, seconds, budget.Strikes())
    for start in range(0, len(inner), CHUNK_UNITS):
        stop = start + CHUNK_UNITS
        results += _bounded(request, inner[start:stop], blame[start:stop], bounds)
    return results


@dataclass(frozen=True)
class _Bounds:
    """What every request of one batch's run shares: where failures go, the item
    limit, and the units past it so far (from budget.STRIKES on, the batch's other
    units are dropped unevaluated, as the Python steps do)."""

    on_error: OnError | None
    seconds: float
    strikes: budget.Strikes


def _bounded(
    request: Request, inner: list[str], blame: list[str | None], bounds: _Bounds
) -> list[str | None]:
    if not inner:
        return []
    on_error, seconds = bounds.on_error, bounds.seconds
    try:
        bounds.strikes.check()
    except StepStruck as struck:
        for xml in blame:
            report(on_error, request.what, xml, struck)
        return [None] * len(inner)
    outcome = _ask(request, inner, blame, seconds)
    if not isinstance(outcome, str):
        computed, dropped = outcome
        for xml, exc in dropped:
            report(on_error, request.what, xml, exc)
        return computed
    if len(inner) == 1:
        failure: Exception
        if outcome == "timeout":
            failure = budget.timed_out(request.what)
        else:
            failure = EvaluationError(
                f"{request.what}: {outcome} on this item, so the item is dropped: if it ran "
                "out of memory (settings.limits.worker_memory), make the query build less"
            )
        bounds.strikes.record(failure)
        report(on_error, request.what, blame[0], failure)
        return [None]
    size = -(-len(inner) // SPLIT)
    results: list[str | None] = []
    for start in range(0, len(inner), size):
        stop = start + size
        results += _bounded(request, inner[start:stop], blame[start:stop], bounds)
    return results


def _ask(
    request: Request, inner: list[str], blame: list[str | None], seconds: float
) -> xqpool.Reply | str:
    """The helper's reply, or why there is none ("timeout", or what happened)."""
    sent = (request.query, request.namespaces, request.kind, dict(request.extra_vars))
    with _guard.lock:
        try:
            helper = _guard.ready()
            started = time.monotonic()
            helper.requests.send((*sent, inner, blame))
            if not helper.replies.poll(_guard.deadline(len(inner), seconds)):
                _guard.discard()
                return "timeout"
            reply = helper.replies.recv()
        except (OSError, EOFError, ValueError):
            return f"Saxon's process ended ({_guard.discard()})"
        took = (time.monotonic() - started) / len(inner)
        _guard.unit_seconds = 0.8 * _guard.unit_seconds + 0.2 * took
    if reply[0] != "ok":
        log.warning("the XQuery helper failed on a share: %s", reply[1])
        return f"the XQuery helper failed ({reply[1]})"
    return reply[1], [(xml, xqpool.restore(exc)) for xml, exc in reply[2]]


def stop() -> None:
    """Stop this process's helper."""
    with _guard.lock:
        _guard.discard()
