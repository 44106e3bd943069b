"""Long finite runs show their progress on a terminal, and only there."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from roses_app.spark.progress import RunProgress, TerminalProgress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_lines_written_over_each_other() -> None:
    out = FakeTerminal()
    show = TerminalProgress(out)
    show("stateless: 1 batch(es), 10 rows | 3s")
    show("stateless: 2 batch(es) | 4s")
    show.close()
    assert out.getvalue() == (
        "\rstateless: 1 batch(es), 10 rows | 3s"
        "\rstateless: 2 batch(es) | 4s         "  # padded over the longer line
        "\n"
    )


def test_a_log_file_or_pipe_gets_nothing() -> None:
    out = io.StringIO()
    show = TerminalProgress(out)
    show("stateless: 1 batch(es)")
    show.close()
    assert out.getvalue() == ""


def _report(batch: int, rows: int) -> Any:
    return SimpleNamespace(batchId=batch, numInputRows=rows)


def test_each_batch_is_counted_once_across_reports() -> None:
    counts = RunProgress(total_events=200)
    first = [_report(0, 50)]
    counts.line({"stateless": first, "gen-x": []}, (1, 2))
    line = counts.line({"stateless": [*first, _report(1, 100)], "gen-x": [_report(0, 7)]}, (0, 0))
    assert line.startswith("stateless: 2 batch(es), 150/200 events (75%) | gen-x: 1 batch(es), 7")
    assert "tasks" not in line


@pytest.mark.spark
def test_replay_reports_every_event_read(tmp_path: Path, spark: Any) -> None:
    from roses_app.config import load_config
    from roses_app.replay import read_events, run_spark

    (tmp_path / "feeds.yaml").write_text(
        f"settings: {{data_dir: {tmp_path / 'data'}}}\n"
        "sources: {a: {feed: 'file:a.xml'}}\n"
        "streams:\n  rain: {filter: {from: a, where: \"contains(title, 'rain')\"}}\n"
    )
    lines = [
        f'{{"source": "a", "ts": {k}, "item": "<item><title>rain {k}</title></item>"}}'
        for k in range(30)
    ]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    shown: list[str] = []
    config = load_config(tmp_path / "feeds.yaml")
    outputs = run_spark(config, read_events(tmp_path / "events.jsonl"), progress=shown.append)
    assert len(outputs["rain"][""]) == 30
    assert shown and shown[-1].startswith("stateless: ")
    assert "30/30 events (100%)" in shown[-1]


class FlakyQuery:
    """A query that fails with ``error`` the first ``failures`` times it is awaited."""

    def __init__(self, error: str, failures: int) -> None:
        self.error, self.failures = error, failures
        self.recentProgress: list[Any] = []

    def awaitTermination(self, timeout: int) -> bool:
        from pyspark.errors import StreamingQueryException

        if self.failures:
            self.failures -= 1
            raise StreamingQueryException(message=self.error)
        return True

    def exception(self) -> None:
        return None


def _running(error: str, failures: int) -> Any:
    from roses_app.spark.queries import RunningQuery

    query = FlakyQuery(error, failures)
    restarts: list[int] = []

    def restart() -> Any:
        restarts.append(1)
        return query

    return RunningQuery("stateless", frozenset(), query, restart), restarts  # type: ignore[arg-type]


def test_a_worker_that_did_not_connect_back_in_time_is_started_again() -> None:
    from roses_app.spark.queries import WORKER_TIMEOUT, await_all

    running, restarts = _running(f"[PYTHON_WORKER] {WORKER_TIMEOUT} in 10000 ms", 2)
    await_all([running])
    assert len(restarts) == 2


def test_other_failures_and_endless_timeouts_are_reported() -> None:
    from roses_app.errors import QueryError
    from roses_app.spark.queries import WORKER_TIMEOUT, await_all

    running, restarts = _running("division by zero", 1)
    with pytest.raises(QueryError, match=r"query stateless failed: .*division by zero"):
        await_all([running])
    assert restarts == []
    running, restarts = _running(WORKER_TIMEOUT, 99)
    with pytest.raises(QueryError, match=WORKER_TIMEOUT):
        await_all([running])
    assert len(restarts) == 3
