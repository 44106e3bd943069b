"""XQuery batches shared with helper processes (ROSES_XQUERY_PROCESSES)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from lxml import etree

from roses_app.algebra.plan.operators import XQuery
from roses_app.errors import EvaluationError
from roses_app.xmlfn import budget, combine_batch, mutate_batch, reduce_batch, xqpool, xquery

ITEM = "<item><title>t{k}</title><guid>g{k}</guid></item>"
QUERY = XQuery(
    "<item>{ $i/title }<n>{ 1 idiv (xs:integer(substring($i/guid, 2)) mod 7) }</n></item>",
    "pool.xq",
    1,
)


@pytest.fixture(scope="module")
def two_processes() -> Iterator[None]:
    """One helper for the module's tests (it takes a second to start); no time limit
    on an item (with one, the guard's helper runs the batches: tests/test_budget.py)."""
    before = budget.limit()
    budget.configure(None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(xqpool.ENV, "2")
        patch.setattr(xqpool, "MIN_SHARE", 5)
        assert xqpool.wait_ready()
        yield
        xqpool.stop()
    budget.configure(before)


def items(n: int) -> list[str | None]:
    return [ITEM.format(k=k) for k in range(n)]


def run_alone(fn: object, *args: object) -> tuple[list[str | None], list[tuple[str | None, str]]]:
    calls: list[tuple[str | None, str]] = []

    def hook(xml: str | None, exc: Exception) -> None:
        calls.append((xml, f"{type(exc).__name__}: {exc}"))

    out = fn(*args, on_error=hook)  # type: ignore[operator]
    return out, calls


def test_processes_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(xqpool.ENV, raising=False)
    assert xqpool.processes() == 1
    monkeypatch.setenv(xqpool.ENV, "3")
    assert xqpool.processes() == 3
    monkeypatch.setenv(xqpool.ENV, "many")
    assert xqpool.processes() == 1


def test_small_batches_stay_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(xqpool.ENV, "2")
    assert xqpool.take(xqpool.MIN_SHARE * 2 - 1) == []


def test_shared_batch_gives_the_same_results_and_errors(
    two_processes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = items(40)
    batch[30] = "<item><title>broken</item>"  # in the helper's share
    batch[17] = None
    shared = run_alone(mutate_batch, QUERY, (), batch)
    monkeypatch.setenv(xqpool.ENV, "1")
    alone = run_alone(mutate_batch, QUERY, (), batch)
    assert shared[0] == alone[0]
    assert sorted(shared[1]) == sorted(alone[1])  # malformed items come first in a share
    out, calls = shared
    assert out[30] is None and out[17] is None and out[0] is None and out[1] is not None
    assert [xml for xml, _ in calls] == [batch[k] for k in (0, 7, 14, 30, 21, 28, 35)]
    assert calls[3][1].startswith("XMLSyntaxError: Opening and ending tag mismatch")
    assert calls[4][1] == "EvaluationError: pool.xq:1: FOAR0001 Integer division by zero"


def test_the_hook_gets_exceptions_of_the_right_kind(two_processes: None) -> None:
    batch = items(20)
    batch[15] = "<item><title>broken</item>"  # in the helper's share
    errors: list[Exception] = []
    mutate_batch(QUERY, (), batch, lambda xml, exc: errors.append(exc))
    assert isinstance(errors[-2], etree.XMLSyntaxError)
    assert isinstance(errors[-1], EvaluationError)


def test_combine_and_reduce_share_too(two_processes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = [(x, y) for x, y in zip(items(30), items(31)[1:], strict=True)]
    combine = XQuery("<item>{ $i1/title, $i2/guid }</item>", "c.xq")
    groups = [items(k % 4) for k in range(30)]
    digest = XQuery("<item><n>{ count($items) }</n><k>{ $key }</k></item>", "r.xq")
    shared = (
        combine_batch(combine, (), pairs),
        reduce_batch(digest, (), groups, extra_vars={"key": "K"}),
    )
    monkeypatch.setenv(xqpool.ENV, "1")
    assert shared == (
        combine_batch(combine, (), pairs),
        reduce_batch(digest, (), groups, extra_vars={"key": "K"}),
    )


def test_a_helper_that_dies_is_replaced(two_processes: None) -> None:
    expected = mutate_batch(QUERY, (), items(30), lambda xml, exc: None)
    (helper,) = xqpool._pool["helpers"]
    helper.process.kill()
    helper.process.wait()
    # its share runs here instead, then a new helper starts
    assert mutate_batch(QUERY, (), items(30), lambda xml, exc: None) == expected
    assert xqpool.wait_ready()
    (replacement,) = xqpool._pool["helpers"]
    assert replacement.process.pid != helper.process.pid
    assert mutate_batch(QUERY, (), items(30), lambda xml, exc: None) == expected


def test_a_forked_child_starts_its_own_helpers(two_processes: None) -> None:
    expected = mutate_batch(QUERY, (), items(30), lambda xml, exc: None)
    (parents,) = xqpool._pool["helpers"]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: like a Spark Python worker
        try:
            forgotten = xqpool._pool["helpers"] == []
            ready = xqpool.wait_ready()
            (own,) = xqpool._pool["helpers"]
            out = mutate_batch(QUERY, (), items(30), lambda xml, exc: None)
            ok = forgotten and ready and own.process.pid != parents.process.pid
            os.write(write, b"ok" if ok and out == expected else b"wrong")
            xqpool.stop()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    os.waitpid(pid, 0)
    assert answer == b"ok"
    assert parents.alive()
    assert mutate_batch(QUERY, (), items(30), lambda xml, exc: None) == expected


def test_a_failure_here_still_collects_the_helpers_share(
    two_processes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = mutate_batch(QUERY, (), items(30), lambda xml, exc: None)
    original = xquery._run_units
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("not expected")
        return original(*args, **kwargs)

    monkeypatch.setattr(xquery, "_run_units", failing)
    submit = xqpool.Helper.submit
    sent = []

    def counting(self: xqpool.Helper, request: Any) -> bool:
        sent.append(1)
        return submit(self, request)

    monkeypatch.setattr(xqpool.Helper, "submit", counting)
    errors: list[Exception] = []
    assert mutate_batch(QUERY, (), items(30), lambda xml, exc: errors.append(exc)) == [None] * 30
    assert len(errors) == 30 and all(isinstance(e, RuntimeError) for e in errors)
    assert sent == [1]
    # the helper's reply was read: the next batch is shared again, and right
    (helper,) = xqpool._pool["helpers"]
    assert not helper.lock.locked()
    assert mutate_batch(QUERY, (), items(30), lambda xml, exc: None) == expected
