"""Sharing ``settings.fetch.budget`` (polls per hour, all sources together) among the
adaptive feed sources by their publication rates (see :mod:`.refresh`): a part of
:class:`~roses_app.connectors.scheduler.FeedScheduler` (its base class), which keeps
each adaptive source's rate as its polls teach it and shares the budget out again
every ``BUDGET_EVERY`` seconds.
"""

from __future__ import annotations

import asyncio

from roses_app.config.model import FeedSource, FetchSettings
from roses_app.connectors.freshness import rate_of
from roses_app.connectors.poller import AsyncPoller
from roses_app.connectors.refresh import Rate, budgeted, per_second
from roses_app.connectors.state import SourceState


class BudgetShares:
    """The budget's share-out (see the module docstring)."""

    settings: FetchSettings
    sources: dict[str, FeedSource]
    poller: AsyncPoller
    budget: dict[str, float] | None  # intervals sharing fetch.budget (None: no budget)
    _rates: dict[str, float]  # adaptive sources' rates, for the budget

    def _learn(self, source: FeedSource, state: SourceState | None) -> None:
        """Keep an adaptive source's rate for the budget's next share-out."""
        if self.settings.budget_per_hour is None or source.fixed:
            return
        if self.budget is None:
            self.budget = {}
        rate = rate_of(state) if state is not None else Rate()
        self._rates[source.name] = per_second(rate, self.poller.interval(source))

    async def _share_budget_soon(self) -> None:
        await asyncio.to_thread(self._share_budget)

    def _share_budget(self) -> None:
        """Share ``fetch.budget`` polls per hour among the adaptive sources by rate
        (what is already scheduled keeps its time; each next poll uses the new share)."""
        if self.settings.budget_per_hour is None or not self._rates:
            return
        names = list(self._rates)
        shares = budgeted(
            [self._rates[n] for n in names],
            self.settings.budget_per_hour - self._fixed_polls_per_hour(),
            min_every=self.settings.min_every_seconds,
            max_every=self.settings.max_every_seconds,
        )
        self.budget = dict(zip(names, shares, strict=True))

    def _fixed_polls_per_hour(self) -> float:
        """What the sources with ``every:`` spend of the budget."""
        return sum(3600.0 / self.poller.interval(s) for s in self.sources.values() if s.fixed)
