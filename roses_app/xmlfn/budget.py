"""The per-item evaluation budget: no expression holds a worker long on one item.

An expression that ``roses check`` accepts may still run for ever on some item
(``count(for $a in 1 to 100000, $b in 1 to 100000 return $a)``), or backtrack for ever
in a regex (``matches(title, '^(a+)+$')`` on forty ``a``).  Past
``settings.limits.item_time`` on one item, its evaluation is abandoned with
:class:`~roses_app.errors.ItemTimeout`: the step's error hook drops that item (counted,
logged) and the other items go on.

* elementpath runs Python bytecode.  While a batch runs (:func:`watching`, in the
  main thread: only it runs signal handlers) a SIGALRM ticks a few times a second, and
  raises in the evaluation that started more than the limit ago (:func:`arm`).  A tick
  per batch rather than a timer per item: arming an evaluation is a clock read and a
  store, not two system calls.
* Python's ``re`` checks no signal inside a match, so elementpath's regex functions
  (matches, replace, tokenize, analyze-string) get the ``regex`` module instead (the
  same syntax and flags), whose matches take the time left to the item as their
  ``timeout`` (:func:`install_regex`); a pattern without quantifiers, which cannot
  backtrack, stays on ``re``.  That bound holds in any thread.
* A range (``1 to 100000000``) is a list elementpath builds in C, seconds and gigabytes
  before the next tick: one longer than :data:`MAX_RANGE` items fails at once
  (:func:`install_range_bound`).  What else an expression builds is bounded by the
  worker's memory limit (``settings.limits.worker_memory``): a MemoryError drops the item.
* Saxon (XQuery) is native code holding the GIL: :mod:`roses_app.xmlfn.xqguard`.
* Any other thread (the daemon's server: pull queries, the console's preview), and
  the main thread outside :func:`watching`, is timed by :mod:`roses_app.xmlfn.watchdog`;
  :func:`within` bounds all of a request's evaluations together.

The limit is per process: ``ROSES_ITEM_SECONDS`` (Spark's workers get it from the
session's ``spark.executorEnv``, see :mod:`roses_app.spark.session`), or
:func:`configure` in the driver.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import regex

from roses_app.errors import ItemMemoryError, ItemTimeout, RequestTimeUp, StepStruck
from roses_app.rlimit import limit_memory
from roses_app.xmlfn.watchdog import WATCHDOG

log = logging.getLogger(__name__)

ENV = "ROSES_ITEM_SECONDS"
DEFAULT_ITEM_SECONDS = 5.0
# how often the timer looks at the evaluation in progress (at most): a late tick
# only lets an item run this much past its limit
MAX_TICK_SECONDS = 0.25
# items of one range expression (a list of Python ints: about 36 bytes each)
MAX_RANGE = 10_000_000


def limit_from_env() -> float | None:
    """``ROSES_ITEM_SECONDS`` (0: no limit), else the default."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_ITEM_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        log.warning("%s=%r is not a number of seconds: using %g", ENV, text, DEFAULT_ITEM_SECONDS)
        return DEFAULT_ITEM_SECONDS
    return seconds if seconds > 0 else None


class _State:
    __slots__ = ("limit", "watching")

    def __init__(self) -> None:
        self.limit: float | None = limit_from_env()
        self.watching = False


class _Evaluation(threading.local):
    """When this thread's evaluation in progress started (0.0: none): a thread of the
    daemon's server (a preview) and the main thread do not time each other.  ``until``:
    when all of this thread's evaluations must be over (0.0: no such bound; see
    :func:`within`); ``watched``: the evaluation in progress is the watchdog's."""

    started = 0.0
    until = 0.0
    watched = False


_state = _State()
_evaluation = _Evaluation()
_MAIN_THREAD = threading.main_thread().ident


def configure(seconds: float | None) -> None:
    """This process's limit (None or 0: none); the environment variable too, so that
    processes started from here (Spark's daemon, XQuery helpers) inherit it."""
    _state.limit = seconds if seconds else None
    os.environ[ENV] = f"{seconds:g}" if seconds else "0"


def limit() -> float | None:
    return _state.limit


def apply(item_seconds: float | None, memory: int | None) -> None:
    """A task's ``settings.limits``, in the worker that runs it: the time an
    expression may take on one item, and the worker's data memory (see
    :mod:`roses_app.rlimit`)."""
    if _state.limit != (item_seconds or None):
        configure(item_seconds)
    if _memory["set"] != memory:
        _memory["set"] = limit_memory(memory)


_memory: dict[str, int | None] = {"set": None}


def arm() -> float:
    """An evaluation starts (a nested one keeps the outer start): hand the result to
    :func:`disarm` when it ends.  Outside the main thread's ticking timer the
    watchdog keeps its deadline; past :func:`within`'s bound it fails at once."""
    outer = _evaluation.started
    if not outer:
        now = time.monotonic()
        until, seconds = _evaluation.until, _state.limit
        if until and now >= until:
            raise RequestTimeUp(WITHIN_MESSAGE)
        _evaluation.started = now
        ticking = _state.watching and threading.get_ident() == _MAIN_THREAD
        if not ticking and (seconds is not None or until):
            own = now + seconds if seconds is not None else math.inf
            # the request's bound first: not the item's fault, so no strike for it
            if until and until <= own:
                WATCHDOG.watch(until, RequestTimeUp)
            else:
                WATCHDOG.watch(own)
            _evaluation.watched = True
    return outer


def disarm(outer: float) -> None:
    if not outer and _evaluation.watched:
        _evaluation.watched = False
        WATCHDOG.unwatch()
    _evaluation.started = outer


WITHIN_MESSAGE = "the time given to this whole request ran out: no more items are evaluated"


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Every evaluation this thread starts in the block ends ``seconds`` from now at
    the latest; past that, one fails at once (a preview over 10,000 items of an
    expression that times out on each one takes ``seconds``, not 10,000 limits)."""
    previous = _evaluation.until
    until = time.monotonic() + seconds
    _evaluation.until = min(until, previous) if previous else until
    try:
        yield
    finally:
        _evaluation.until = previous


STRIKES = 3  # items of one step in one batch past the limit: then the rest go unevaluated
STRUCK_MESSAGE = (
    f"not evaluated: this step ran past settings.limits.item_time on {STRIKES} items of "
    "this batch already, so its other items in the batch are dropped at once (one slow "
    "expression must not hold every stream of its query for a limit per item): make the "
    "expression cheaper or raise the limit"
)


class Strikes:
    """The items of one step in one batch that ran past the limit: from
    :data:`STRIKES` on, :meth:`check` fails the step's other items of the batch at
    once (a burst of 100 items each stalling would hold a Spark batch, and every
    stream its query runs, 100 limits long)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def check(self) -> None:
        if self.count >= STRIKES:
            raise StepStruck(STRUCK_MESSAGE)

    def record(self, exc: BaseException) -> None:
        """Count ``exc`` if it is an item of its own past the limit (not one failed
        by these strikes, or by :func:`within`'s bound on a whole request)."""
        if isinstance(exc, ItemTimeout) and not isinstance(exc, StepStruck | RequestTimeUp):
            self.count += 1


def timed_out(what: str) -> ItemTimeout:
    """What an evaluation of ``what`` stopped now raises: :func:`within`'s bound on
    the whole request, or the item's own limit."""
    if _evaluation.until and time.monotonic() >= _evaluation.until:
        return RequestTimeUp(f"{what} was stopped: {WITHIN_MESSAGE}")
    return ItemTimeout(
        f"{what} ran for more than {_state.limit:g} s on this item (settings.limits."
        "item_time), so the item is dropped: make the expression cheaper (no nested "
        "repetition such as (a+)+ in a regex, smaller for/to ranges) or raise the limit"
    )


def remaining() -> float | None:
    """Seconds left to the evaluation in progress (None: no limit); raises
    ItemTimeout when none are left."""
    started, seconds, until = _evaluation.started, _state.limit, _evaluation.until
    if not started or (seconds is None and not until):
        return None
    now = time.monotonic()
    left = min(
        seconds - (now - started) if seconds is not None else math.inf,
        until - now if until else math.inf,
    )
    if left <= 0:
        raise timed_out("the expression")
    return left


def _tick(signum: int, frame: Any) -> None:
    started, seconds = _evaluation.started, _state.limit  # the main thread's
    if started and seconds is not None and time.monotonic() - started > seconds:
        raise timed_out("the expression")


@contextmanager
def watching() -> Iterator[None]:
    """The timer ticks while the block runs (a no-op without a limit, when already
    ticking, or outside the main thread, where only regexes are bounded)."""
    seconds = _state.limit
    main = threading.current_thread() is threading.main_thread()
    if seconds is None or _state.watching or not main:
        yield
        return
    tick = min(MAX_TICK_SECONDS, seconds / 4)
    previous = signal.signal(signal.SIGALRM, _tick)
    # system calls of other threads (Saxon's, Arrow's) go on rather than fail with EINTR
    signal.siginterrupt(signal.SIGALRM, False)
    _state.watching = True
    signal.setitimer(signal.ITIMER_REAL, tick, tick)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _state.watching = False
        signal.signal(signal.SIGALRM, previous)


# -- regexes with a deadline -----------------------------------------------------------


class _TimedPattern:
    """A compiled ``regex`` pattern whose matching methods get the item's time left."""

    __slots__ = ("_compiled", "flags", "groups", "pattern")

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.pattern: str = compiled.pattern
        self.groups: int = compiled.groups
        self.flags: int = compiled.flags

    def _timed_out(self, exc: TimeoutError) -> ItemTimeout:
        if isinstance(exc, ItemTimeout):
            return exc
        return timed_out(f"the regex {self.pattern!r}")

    def search(self, string: str, *args: Any) -> Any:
        try:
            return self._compiled.search(string, *args, timeout=remaining())
        except TimeoutError as exc:
            raise self._timed_out(exc) from exc

    def match(self, string: str, *args: Any) -> Any:
        try:
            return self._compiled.match(string, *args, timeout=remaining())
        except TimeoutError as exc:
            raise self._timed_out(exc) from exc

    def sub(self, repl: Any, string: str, count: int = 0) -> Any:
        try:
            return self._compiled.sub(repl, string, count, timeout=remaining())
        except TimeoutError as exc:
            raise self._timed_out(exc) from exc

    def split(self, string: str, maxsplit: int = 0) -> Any:
        try:
            return self._compiled.split(string, maxsplit, timeout=remaining())
        except TimeoutError as exc:
            raise self._timed_out(exc) from exc


# A quantifier (or what may be one, escaped or not): a pattern without any cannot
# backtrack, and runs on Python's re, several times faster on short strings (the
# separators of tokenize, literal words of matches)
_MAY_REPEAT = re.compile(r"[*+?{]")


@lru_cache(maxsize=512)
def _compile(pattern: str, flags: int = 0) -> Any:
    # re first: a pattern it refuses raises re.error as elementpath expects
    plain = re.compile(pattern, flags)
    if not _MAY_REPEAT.search(pattern):
        return plain
    try:
        return _TimedPattern(regex.compile(pattern, flags | regex.VERSION0))
    except regex.error as exc:  # not seen with elementpath's translations
        log.warning("regex %r runs on Python's re, without a time limit: %s", pattern, exc)
        return plain


def _search(pattern: str, string: str, flags: int = 0) -> Any:
    return _compile(pattern, flags).search(string)


def _timed_re() -> types.ModuleType:
    """``re``, with compile and search timed (the rest, e.g. escape and error, as is)."""
    module = types.ModuleType("roses_timed_re", "re with time limits (roses_app.xmlfn.budget)")
    module.__dict__.update({k: v for k, v in vars(re).items() if not k.startswith("__")})
    module.compile = _compile  # type: ignore[attr-defined]
    module.search = _search  # type: ignore[attr-defined]
    return module


TIMED_RE = _timed_re()


def install_regex() -> bool:
    """Point elementpath's regex functions at :data:`TIMED_RE` (they use ``re``
    through their module's global); False, and a warning, if elementpath's layout has
    changed so that they cannot be."""
    from elementpath.xpath2 import _xpath2_functions
    from elementpath.xpath30 import _xpath30_functions

    installed = True
    for module in (_xpath2_functions, _xpath30_functions):
        found = getattr(module, "re", None)
        if found is re:
            module.re = TIMED_RE  # type: ignore[attr-defined]
        elif found is not TIMED_RE:
            log.warning("%s has no re module: its regexes have no time limit", module.__name__)
            installed = False
    return installed


def install_range_bound() -> None:
    """Make elementpath's ``to`` refuse a range of more than :data:`MAX_RANGE` items."""
    from elementpath.xpath2.xpath2_parser import XPath2Parser

    token = XPath2Parser.symbol_table["to"]
    unbounded = token.evaluate
    if getattr(unbounded, "bounded", False):
        return

    def evaluate(self: Any, context: Any = None) -> Any:
        start, stop = self.get_operands(context)
        if isinstance(start, int) and isinstance(stop, int) and stop - start >= MAX_RANGE:
            raise ItemMemoryError(
                f"the range {start} to {stop} has more than {MAX_RANGE:,} items, the most "
                "an expression may build: iterate over a smaller one"
            )
        return unbounded(self, context)

    evaluate.bounded = True  # type: ignore[attr-defined]
    token.evaluate = evaluate
