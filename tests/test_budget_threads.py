"""Expressions evaluated outside Spark's workers are timed too (issue 43, item 1).

The daemon's server evaluates expressions in its threads: pull queries
(``GET /streams/NAME``) and the console's preview run the reference engine there,
where no signal handler runs.  The watchdog stops an evaluation past its item's
limit from another thread; :func:`budget.within` bounds a whole request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_budget import item, one_second  # noqa: F401  (a fixture: the limit at 1 s)

from roses_app.config import load_config
from roses_app.errors import ItemTimeout, RequestTimeUp, StepStruck
from roses_app.publish.preview import Previewer, PreviewRequest
from roses_app.spool import Spool
from roses_app.xmlfn import budget, filter_batch
from roses_app.xmlfn.xpath import compile_xpath, parse

LOOPS = "count(for $a in 1 to 100000, $b in 1 to 100000 return $a) > 0"


def in_thread(work: Callable[[], Any]) -> Any:
    """``work()`` in a thread of its own: what it returned, or raised."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:
            done.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert done, "the thread was not stopped"
    return done[0]


@pytest.mark.usefixtures("one_second")
def test_a_stalling_expression_in_a_server_thread_drops_its_item_only() -> None:
    dropped: list[Exception] = []

    def work() -> list[object]:
        return filter_batch(
            LOOPS,
            (),
            [item("a", "bad"), item("b", "also")],
            on_error=lambda _, e: dropped.append(e),
        )

    started = time.monotonic()
    kept = in_thread(work)
    took = time.monotonic() - started
    assert kept == [False, False] and len(dropped) == 2, (kept, dropped)
    assert all(isinstance(e, ItemTimeout) for e in dropped)
    assert "ran for more than 1 s on this item (settings.limits.item_time)" in str(dropped[0])
    assert took < 2 * (1.0 + 0.5) + 3.0  # each item its own second, not minutes


@pytest.mark.usefixtures("one_second")
def test_a_stop_never_comes_out_after_its_evaluation() -> None:
    """An evaluation that ends as its stop is sent: the thread goes on unharmed."""
    quick = compile_xpath("count(for $a in 1 to 2000 return $a) > 0")
    node = parse(item("a", "1"))

    def work() -> int:
        done = 0
        deadline = time.monotonic() + 2.5  # evaluations back to back, past many ticks
        while time.monotonic() < deadline:
            assert quick.boolean(node)
            done += 1
        time.sleep(0.5)  # a stop sent and left pending would be raised here
        return done

    assert isinstance(in_thread(work), int)


def test_within_bounds_all_of_a_requests_evaluations() -> None:
    """100 items each stalling: 1 s for all of them, not 100 item limits."""
    dropped: list[Exception] = []
    items = [item("a", str(n)) for n in range(100)]

    def work() -> list[object]:
        with budget.within(1.0):
            return filter_batch(LOOPS, (), items, on_error=lambda _, e: dropped.append(e))

    started = time.monotonic()
    kept = in_thread(work)
    assert time.monotonic() - started < 1.0 + 3.0
    assert kept == [False] * 100 and len(dropped) == 100
    assert isinstance(dropped[-1], RequestTimeUp) and budget.WITHIN_MESSAGE in str(dropped[-1])
    # outside the block the same thread evaluates as before
    assert in_thread(lambda: filter_batch("title = 'a'", (), items[:1])) == [True]


@pytest.mark.usefixtures("one_second")
@pytest.mark.parametrize("request_seconds", [None, 0.3])
def test_the_watchdog_says_whose_limit_stopped_an_evaluation(request_seconds: float | None) -> None:
    """Code that raises what the watchdog sends as it comes (no expression to name)
    still tells the item's own limit, a strike against its step, from the end of the
    request's time, which is no fault of the item."""

    def spin() -> type[BaseException]:
        outer = budget.arm()
        try:
            while True:
                pass
        except ItemTimeout as exc:
            return type(exc)
        finally:
            budget.disarm(outer)

    def work() -> type[BaseException]:
        if request_seconds is None:
            return spin()
        with budget.within(request_seconds):
            return spin()

    stopped = in_thread(work)
    assert stopped is (ItemTimeout if request_seconds is None else RequestTimeUp)
    strikes = budget.Strikes()
    strikes.record(stopped())
    assert strikes.count == (1 if request_seconds is None else 0)


@pytest.mark.usefixtures("one_second")
def test_the_main_thread_outside_a_batch_is_timed_too() -> None:
    """(``roses query`` and the reference engine evaluate in the main thread without
    the batch's ticking timer.)"""
    stalling = compile_xpath(LOOPS)
    started = time.monotonic()
    with pytest.raises(ItemTimeout):
        stalling.boolean(parse(item("a", "1")))
    assert time.monotonic() - started < 1.0 + 3.0


def test_a_preview_of_a_stalling_filter_ends_within_its_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The console's preview of a filter that stalls on every item: each item would
    take settings.limits.item_time (5 s); the preview ends after PREVIEW_SECONDS,
    counting the items it dropped and saying why."""
    from roses_app.publish import preview as previews

    monkeypatch.setattr(previews, "PREVIEW_SECONDS", 1.0)
    (tmp_path / "feeds.yaml").write_text(
        'settings: {data_dir: ./data}\nsources:\n  news: {feed: "file:news.xml"}\n'
        'streams:\n  all: {filter: {from: news, where: "title"}}\n'
    )
    config = load_config(tmp_path / "feeds.yaml")
    spool = Spool(tmp_path / "data" / "spool")
    spool.append_many([("news", [(item(f"news {n}", f"g{n}"), None) for n in range(50)])])
    previewer = Previewer(lambda: config, spool.root)
    started = time.monotonic()
    result = in_thread(lambda: previewer.preview(PreviewRequest(LOOPS, "where", source="news")))
    assert time.monotonic() - started < 1.0 + 4.0, "not 50 item limits"
    assert result.scanned == 50 and result.matched == 0 and result.failed == 50
    assert result.failure is not None and budget.WITHIN_MESSAGE in result.failure
    assert LOOPS in result.failure  # the first one names the expression


# -- a step that keeps timing out in one batch ------------------------------------------


@pytest.mark.usefixtures("one_second")
def test_after_three_items_past_the_limit_a_batch_drops_the_steps_other_items_at_once() -> None:
    """A burst of 20 stalling items: three limits, not twenty, then the batch's other
    items of that step are dropped unevaluated, each counted with the reason."""
    dropped: list[Exception] = []
    title_bomb = "if (title = 'bad') then " + LOOPS + " else true()"
    items = [item("ok", "first")] + [item("bad", f"b{n}") for n in range(20)]
    started = time.monotonic()
    kept = filter_batch(title_bomb, (), [*items, item("ok", "last")],
                        on_error=lambda _, e: dropped.append(e))  # fmt: skip
    took = time.monotonic() - started
    assert kept[0] is True and kept[1:] == [False] * 21
    assert len(dropped) == 21
    assert sum(isinstance(e, StepStruck) for e in dropped) == 18
    assert all(budget.STRUCK_MESSAGE in str(e) for e in dropped if isinstance(e, StepStruck))
    assert took < budget.STRIKES * (1.0 + 0.5) + 3.0  # not 20 limits
    # the next batch starts with a clean slate
    assert filter_batch(title_bomb, (), [item("ok", "again")]) == [True]


@pytest.mark.usefixtures("one_second")
def test_the_fused_stage_strikes_per_step_and_batch_too() -> None:
    from roses_app.algebra.plan.operators import Filter, Source
    from roses_app.algebra.planner.program import build_program
    from roses_app.xmlfn.fused import run_program

    bomb = Filter(Source("news"), "if (title = 'bad') then " + LOOPS + " else true()")
    fine = Filter(Source("news"), "title = 'ok'")
    program = build_program([(bomb, "slow"), (fine, "control")])
    items = [item("bad", f"b{n}") for n in range(20)] + [item("ok", "o")]
    started = time.monotonic()
    rows = run_program(
        program, ["news"] * len(items), list(range(len(items))), list(range(len(items))), items,
        presearch=False,
    )  # fmt: skip
    assert time.monotonic() - started < budget.STRIKES * (1.0 + 0.5) + 3.0
    control = [index for index, (_, name) in enumerate(program.outputs) if name == "control"]
    published = [row[3] for row in rows if set(row[0]) & set(control)]
    assert published == [20]  # the other stream of the batch got its item


@pytest.mark.usefixtures("one_second")
def test_a_forked_child_times_its_evaluations_with_a_watchdog_of_its_own() -> None:
    """(The parent's watchdog thread, and perhaps its lock, stay behind in a fork.)"""
    import os

    from roses_app.xmlfn.watchdog import WATCHDOG

    with WATCHDOG._lock:  # held at the fork, as the parent's thread may hold it
        pid = os.fork()
        if pid == 0:  # the child: a stalling evaluation must still be stopped
            try:
                compile_xpath(LOOPS).boolean(parse(item("a", "1")))
                os._exit(1)
            except ItemTimeout:
                os._exit(0)
            except BaseException:
                os._exit(2)
    deadline = time.monotonic() + 30
    while (found := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    if found[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the child hung on the watchdog's lock")
    assert os.waitstatus_to_exitcode(found[1]) == 0
