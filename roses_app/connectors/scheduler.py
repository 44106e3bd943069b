"""Scheduling feed polls: one event loop waits on every server, APScheduler wakes it.

What happens to a source, from one poll to the next:

1. It is *due* at a time (the first time: when its stored state says, else now).  A
   :class:`~roses_app.connectors.pollqueue.PollQueue` starts due sources in due
   order, at most ``fetch.concurrency`` in flight and ``fetch.per_host`` to one host,
   starts on one host ``fetch.host_spacing`` apart.  A source started after its time
   is late, never skipped: the lag is counted (``PollResult.lag_seconds``).
2. Its fetch is a coroutine on the connector's event loop (a thread of its own,
   :class:`~roses_app.connectors.loopthread.LoopThread`): a server that never answers
   holds one slot until ``fetch.timeout``, nothing else.
3. A fetched document is parsed in a worker process
   (:class:`~roses_app.connectors.parsepool.ParsePool`), never on the loop.
4. Its items and state are committed with those of the other polls ending at the
   same moment (:class:`~roses_app.connectors.committer.Committer`).
5. It is due again after its interval (or its backoff, or ``Retry-After``); a source
   that is gone (410) is not.

APScheduler (``AsyncIOScheduler``, on the same loop) runs one job: hand the due
sources to the fetcher.  The job is moved to the next time something may start (a due
time, or a host's spacing ending), and a poll that ends hands out its slot at once.
One job rather than one per source: 100,000 jobs cost APScheduler seconds to add and
a sorted-list insertion at every run, and each late run is a warning ("missed"),
where a late poll should just be done late and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from roses_app.config.model import FeedSource, FetchSettings, SourceConfig
from roses_app.connectors.budgetshare import BudgetShares
from roses_app.connectors.committer import Committer, SinkMany
from roses_app.connectors.fetch import AsyncFetcher
from roses_app.connectors.freshness import at_risk, next_interval
from roses_app.connectors.listing import Live
from roses_app.connectors.loopthread import LoopThread
from roses_app.connectors.parsepool import ParsePool
from roses_app.connectors.poller import AsyncPoller, Items, PollResult
from roses_app.connectors.pollqueue import PollQueue, host_of
from roses_app.connectors.pushin import PushIn
from roses_app.connectors.refresh import Interval
from roses_app.connectors.state import SourceState, StateStore
from roses_app.connectors.websub_in import SAFETY_FACTOR, Subscriber, is_pushed, safety_interval

log = logging.getLogger(__name__)

ResultHook = Callable[[PollResult], None]
JOB = "dispatch"
STOP_SECONDS = 10.0  # a stop waits this long for the loop's tasks to end
BUDGET_EVERY = 60.0  # seconds between two share-outs of settings.fetch.budget
RENEW_EVERY = 60.0  # seconds between two looks at WebSub leases ending
MANY = 1_000_000  # "no limit" for APScheduler's instances of the dispatch job


class FeedScheduler(BudgetShares, PushIn):
    """Polls every feed source when it is due (see the module docstring)."""

    def __init__(
        self,
        states: StateStore,
        settings: FetchSettings,
        sources: Iterable[SourceConfig] | Mapping[str, SourceConfig],
        sink_many: SinkMany,
        clock: Callable[[], float] = time.time,
        *,
        base_dir: Path | None = None,
        on_result: ResultHook | None = None,
        subscriber: Subscriber | None = None,
        spill_dir: Path | None = None,
        append_every: float = 0.0,
    ) -> None:
        self.states = states
        self.append_every = append_every  # the daemon's pace of items' appends (Committer)
        self.spill_dir = spill_dir  # where large documents go to the parse workers
        self.settings = settings
        values = sources.values() if isinstance(sources, Mapping) else sources
        self.sources = {s.name: s for s in values if isinstance(s, FeedSource)}
        self.sink_many = sink_many
        self.clock = clock
        self.base_dir = base_dir
        self.on_result = on_result
        self.subscriber = subscriber  # WebSub: hubs the feeds name (with base_url only)
        self.pushes = 0  # documents pushed in and accepted
        self._chores: set[asyncio.Task[Any]] = set()  # subscriptions, pushes
        self.last_results: dict[str, tuple[float, PollResult]] = {}
        self.outcomes: Counter[str] = Counter()  # sources by their last poll's status
        self.intervals: dict[str, Interval] = {}  # each source's current interval, and why
        self._risky: set[str] = set()  # sources whose late poll loses items (at_risk)
        self.budget: dict[str, float] | None = None  # intervals sharing fetch.budget
        self._rates: dict[str, float] = {}  # adaptive sources' rates, for the budget
        self.queue = PollQueue(
            settings.concurrency, settings.per_host, settings.host_spacing_seconds
        )
        self._thread: LoopThread | None = None
        self._tasks: set[asyncio.Task[PollResult]] = set()
        self._aps: AsyncIOScheduler | None = None
        self._armed: float | None = None  # when the dispatch job runs next
        self._freed: asyncio.Event | None = None  # a once run: a fetch ended
        self._finished: list[asyncio.Task[PollResult]] = []
        self._stopping = False  # a stop cancels the polls: none starts in their place

    def live(self) -> Live:
        """What this scheduler knows of its sources, for :mod:`listing`."""

        def lag(name: str) -> float | None:
            last = self.last_results.get(name)
            return None if last is None else round(last[1].lag_seconds, 3)

        return Live(self.queue.due_at, self.intervals, lag)

    @property
    def running(self) -> bool:
        return self._aps is not None and self._aps.running

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Schedule every source and return; polls go on in the connector's thread."""
        if self._thread is not None:
            raise RuntimeError("FeedScheduler already started")
        self._thread = LoopThread("roses-fetch")
        self._thread.run(self._start())
        log.info("polling %d feed source(s)", len(self.sources))

    def poll_all_once(self, force: bool = False) -> list[PollResult]:
        """Poll every source once, concurrently; results in source order (``roses once``)."""
        if not self.sources:
            return []
        thread = LoopThread("roses-fetch-once")
        try:
            return thread.run(self._once(force))
        finally:
            thread.close()

    def shutdown(self, wait: bool = True) -> None:
        """Stop: polls in flight are cancelled (their fetch, their parse), what is
        already queued for the spool is written, nothing is half-written."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            thread.run(self._stop(), STOP_SECONDS if wait else 1.0)
        finally:
            thread.close()

    async def _open(self, pace: float = 0.0) -> None:
        """The connector's parts, made on the loop that uses them (``pace``: see
        :class:`Committer`; none for a once run, whose Spark run starts after its polls)."""
        self.fetcher = AsyncFetcher(self.settings, self.clock, base_dir=self.base_dir)
        self.parser = ParsePool(
            self.settings.parse_workers, self.settings.max_items, self.spill_dir
        )
        self.committer = Committer(self.sink_many, self.states, pace=pace)
        self.committer.start()
        self.poller = AsyncPoller(
            self.states,
            self.settings,
            self.clock,
            self.fetcher,
            self.parser.parse,
            self._commit if pace > 0 else self.committer.commit,
            on_document=self._document if self.subscriber is not None else None,
            on_fetched=self._fetched,
        )

    async def _start(self) -> None:
        self._stopping = False
        await self._open(self.append_every)
        self._schedule(self.sources.values())
        self._aps = AsyncIOScheduler(event_loop=asyncio.get_running_loop(), timezone=UTC)
        self._aps.add_job(
            self._dispatch,
            "interval",
            seconds=60.0,  # a safety net: the job is moved to each next start
            id=JOB,
            name="start due polls",
            # The job moves itself to the next start while it runs, and that start may
            # be now: one instance at a time would skip that run (and wait the 60 s).
            # Runs cannot overlap anyway: the job never awaits.
            max_instances=MANY,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC),
        )
        if self.subscriber is not None:  # at once (sources that left the config), then...
            self._aps.add_job(
                self._renew,
                "interval",
                seconds=RENEW_EVERY,
                id="websub",
                next_run_time=datetime.now(UTC),
            )
        if self.settings.budget_per_hour is not None:
            self._aps.add_job(
                self._share_budget_soon, "interval", seconds=BUDGET_EVERY, id="budget"
            )
        self._aps.start()

    def _schedule(self, sources: Iterable[FeedSource]) -> None:
        """Schedule ``sources``' next polls: when their stored state says, else now."""
        now = self.clock()
        known = {state.name: state for state in self.states.all()}
        polled: dict[str, SourceState | None] = {}
        for source in sources:
            state = known.get(source.name)
            if state is not None and state.configured_url != source.url:
                state = None  # its URL changed: it starts over
            if state is None or not state.gone:  # 410: not polled until its URL changes
                polled[source.name] = state
                self._learn(source, state)
        self._share_budget()
        for name, state in polled.items():
            source = self.sources[name]
            interval = self._interval(source, state, now).seconds
            at = now
            if state is not None:
                at = max(now, (state.last_attempt_at or 0.0) + interval, state.next_allowed_at)
                at = min(at, now + interval)  # a clock moved back
            risky = self._note_risk(source, state)
            with contextlib.suppress(ValueError):  # in flight: scheduled when it ends
                self.queue.schedule(name, host_of(source.url), at, interval, risky)

    def update_sources(self, sources: Mapping[str, SourceConfig]) -> None:
        """Poll the feed sources of ``sources`` from now on (a config reloaded): new
        ones are scheduled as at a start, changed ones again, removed ones are not
        polled any more (a poll in flight ends) and their WebSub subscriptions end."""
        feeds = {s.name: s for s in sources.values() if isinstance(s, FeedSource)}
        if self._thread is None:
            self.sources = feeds
            return
        self._thread.run(self._update(feeds))

    async def _update(self, feeds: dict[str, FeedSource]) -> None:
        old, self.sources = self.sources, feeds  # one new dict: other threads read it
        for name in old.keys() - feeds.keys():
            self.queue.unschedule(name)
            self.intervals.pop(name, None)
            self._rates.pop(name, None)
            self._risky.discard(name)
        self._schedule(source for name, source in feeds.items() if old.get(name) != source)
        self._arm()
        self._unsubscribe_orphans()

    async def _stop(self) -> None:
        self._stopping = True
        if self._aps is not None and self._aps.running:
            self._aps.shutdown(wait=False)
            # a dispatch job APScheduler has handed to the loop runs now (it never
            # awaits): cancelled by the loop's close instead, APScheduler logged a
            # traceback of its CancelledError at every such stop
            await asyncio.sleep(0)
        await self._cancel_polls()
        await self._close_parts()

    async def _cancel_polls(self) -> None:
        tasks = [*self._tasks, *self._chores]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _close_parts(self) -> None:
        await self.committer.close()
        await self.fetcher.aclose()
        if self.subscriber is not None:
            await self.subscriber.aclose()
        self.parser.shutdown()

    # -- polling -------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        """The APScheduler job: start what may start, then move the job to the next time."""
        self._armed = None
        self._start_due()
        self._arm()

    def _start_due(self, once: bool = False) -> None:
        if self._stopping:
            return
        for name, due in self.queue.take(self.clock()):
            self._spawn(self._poll(name, due, once))

    def _spawn(self, poll: Coroutine[Any, Any, PollResult]) -> None:
        task = asyncio.get_running_loop().create_task(poll)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[PollResult]) -> None:
        self._tasks.discard(task)
        if self._freed is not None and not task.cancelled():
            self._finished.append(task)  # a once run collects the results

    def _arm(self) -> None:
        """Move the dispatch job to when :meth:`PollQueue.take` may give a poll again."""
        wake = self.queue.next_wakeup()
        if wake is None or self._aps is None or not self._aps.running:
            return
        if self._armed is not None and self.clock() <= self._armed <= wake:
            return  # the job already runs at or before then
        self._armed = wake
        delay = max(0.0, wake - self.clock())  # the injected clock's time, in real time
        self._aps.modify_job(JOB, next_run_time=datetime.now(UTC) + timedelta(seconds=delay))

    async def _poll(
        self, name: str, due: float, once: bool = False, force: bool = False
    ) -> PollResult:
        source = self.sources[name]
        started = self.clock()
        try:
            result = await self.poller.poll(source, force)
        finally:
            self.queue.done(name)
            if not once:
                self._start_due()  # the slot it held goes to the next due source
        result = replace(result, lag_seconds=max(0.0, started - due))
        now = self.sources.get(name)  # (a reload may have changed or removed it)
        if not once and now is not None and now is not source:
            self._schedule([now])
            self._arm()
        elif not once and result.status != "gone" and now is not None:
            at = self._next_due(source, result)
            chosen = self.intervals.get(name)
            result = replace(
                result,
                interval_seconds=at - self.clock(),
                interval_reason=chosen.reason if chosen is not None else "",
            )
            # its deadline: the interval again (later, the poll is as good as skipped);
            # at risk as its last success said
            risky = self._note_risk(source, result.state) if result.state else name in self._risky
            self.queue.schedule(name, host_of(source.url), at, at - self.clock(), risky)
            self._arm()
        self._record(result)
        return result

    async def _commit(self, name: str, items: Items, state: SourceState | None) -> None:
        """A paced commit: a poll whose items wait for the next append leaves its place
        among the ``concurrency`` polls in flight (waiting for the pace is no parsing
        backlog, and the committer's queue is bounded by its ``max_polls``)."""
        if items:
            self.queue.done(name)
            self._start_due()
        await self.committer.commit(name, items, state)

    def _fetched(self, name: str) -> None:
        """A fetch ended: its slots go to the next due sources at once."""
        self.queue.release(name)
        if self._aps is not None:
            self._start_due()
        elif self._freed is not None:  # a once run: its pump starts them
            self._freed.set()

    def _next_due(self, source: FeedSource, result: PollResult) -> float:
        now = self.clock()
        if result.state is not None:  # a success: what it taught decides
            self._learn(source, result.state)
            interval = self._interval(source, result.state, now).seconds
        else:
            known = self.intervals.get(source.name)
            interval = known.seconds if known is not None else self.poller.interval(source)
        return max(now + interval, result.next_allowed_at)

    def _note_risk(self, source: FeedSource, state: SourceState | None) -> bool:
        """Whether a late poll of ``source`` loses items (kept for its failed polls)."""
        if at_risk(source, state, self.settings):
            self._risky.add(source.name)
            return True
        self._risky.discard(source.name)
        return False

    def _interval(self, source: FeedSource, state: SourceState | None, now: float) -> Interval:
        chosen = next_interval(source, state, self.settings, now, self.budget)
        if self.subscriber is not None:
            push = self.subscriber.get(source.name)
            if is_pushed(push, now, chosen.seconds):
                seconds = safety_interval(chosen.seconds)
                chosen = Interval(seconds, f"WebSub pushes arrive: polled as a safety net "
                                  f"({chosen.reason}, {SAFETY_FACTOR:g}× longer)")  # fmt: skip
        self.intervals[source.name] = chosen
        return chosen

    def _record(self, result: PollResult) -> None:
        last = self.last_results.get(result.source)
        if last is not None:
            self.outcomes[last[1].status] -= 1
        self.outcomes[result.status] += 1
        self.last_results[result.source] = (self.clock(), result)
        # debug: the daemon logs what a poll spooled (one line a poll, not two: at
        # 100,000 feeds a first round wrote 200,000 lines)
        if result.status == "ok":
            log.debug("source %s: %s", result.source, result.message)
        elif result.status == "not_modified":
            log.debug("source %s: not modified", result.source)
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:
                log.exception("source %s: the result hook failed", result.source)

    async def _once(self, force: bool) -> list[PollResult]:
        """Every source polled once, through the same queue and limits as the daemon's."""
        await self._open()
        try:
            now = self.clock()
            for source in self.sources.values():
                self.queue.schedule(source.name, host_of(source.url), now)
            results: dict[str, PollResult] = {}
            self._freed = asyncio.Event()
            while len(results) < len(self.sources):
                for name, due in self.queue.take(self.clock()):
                    self._spawn(self._poll(name, due, True, force))
                wake = self.queue.next_wakeup()
                timeout = None if wake is None else max(0.0, wake - self.clock())
                self._freed.clear()
                freed = asyncio.ensure_future(self._freed.wait())
                await asyncio.wait(
                    {*self._tasks, freed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                freed.cancel()
                for task in list(self._finished):
                    results[task.result().source] = task.result()
                self._finished.clear()
            return [results[name] for name in self.sources]
        finally:
            self._freed = None
            await self._cancel_polls()
            await self._close_parts()
