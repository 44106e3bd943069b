"""Seed 002's worked tables for windows, delta, product, joins, aggregation and group-by,
checked row by row through both engines (tests/data/replay/seed_time).

The tables are written here as the seed prints them: time → the items at that time.
Items are named by their title; a join pair i1·i2 is the combine's title.  Within one
time the seed lists a set, so rows are compared as sorted lists (the windows' rows in
their order too, which is the input order).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import seed_tables as seed

from roses_app.config import load_config
from roses_app.replay import Outputs, read_events, run_reference, run_spark

FIXTURE = Path(__file__).parent / "data" / "replay" / "seed_time"
TITLE = re.compile(r"<title>(.*?)</title>")

Table = dict[int, str]  # time -> comma-separated items


def _letters(rows: dict[int, str]) -> Table:
    return {t: ",".join(v) for t, v in rows.items()}


def _listed(rows: dict[int, list[str]]) -> Table:
    return {t: ",".join(v) for t, v in rows.items() if v}


# "Fenêtres time-based" and "count-based"; "Delta insert" and "Delta delete"
TIME_3 = _letters(seed.TIME_3)
TIME_2041 = _letters(seed.TIME_2_0_4_1)
COUNT_8 = _letters(seed.COUNT_8)
DELTA_INSERT = _letters(seed.DELTA_INSERT)
DELTA_DELETE = _letters(seed.DELTA_DELETE)
# "Produit cartésien" and the three "Jointure" tables (times with items)
PRODUCT = _listed(seed.PRODUCT)
INNER = _listed(seed.INNER)
LEFT_OUTER = _listed(seed.LEFT_OUTER)
FULL_OUTER = _listed(seed.FULL_OUTER)
# "Agrégation": one item per time (the reducer joins the titles: j = a1+b1+c1, ...)
AGGREGATION = {1: "a1+b1+c1", 2: "d1+e1", 3: "f1+g1+h1+i1"}
# "Group by": one item per time and group
GROUP_BY = {1: "a,b,c", 2: "d,e", 3: "f,g,h,i"}

TABLES: dict[str, tuple[Table, range, bool]] = {
    # stream: (the seed's rows, the times the table shows, compare in order)
    "time3": (TIME_3, range(1, 10), True),
    "time2041": (TIME_2041, range(1, 10), True),
    "count8": (COUNT_8, range(1, 10), True),
    "delta_insert": (DELTA_INSERT, range(1, 12), True),
    "delta_delete": (DELTA_DELETE, range(1, 12), True),
    "product": (PRODUCT, range(1, 7), False),
    "inner": (INNER, range(1, 7), False),
    "left_outer": (LEFT_OUTER, range(1, 7), False),
    "full_outer": (FULL_OUTER, range(1, 7), False),
    "aggregation": (AGGREGATION, range(1, 5), False),
    "group_by": (GROUP_BY, range(1, 5), False),
}


def _rows(outputs: Outputs, stream: str, times: range, in_order: bool) -> Table:
    rows: dict[int, list[str]] = {}
    for event in outputs[stream][""]:
        if event.ts in times:
            match = TITLE.search(event.item or "")
            assert match is not None, event
            rows.setdefault(event.ts, []).append(match.group(1))
    return {t: ",".join(v if in_order else sorted(v)) for t, v in rows.items()}


def _expected(table: Table, in_order: bool) -> Table:
    return {t: v if in_order else ",".join(sorted(v.split(","))) for t, v in table.items()}


def _check(outputs: Outputs) -> None:
    for stream, (table, times, in_order) in TABLES.items():
        assert _rows(outputs, stream, times, in_order) == _expected(table, in_order), stream


def test_reference_engine_reproduces_the_seed_tables() -> None:
    config = load_config(FIXTURE / "feeds.yaml")
    _check(run_reference(config, read_events(FIXTURE / "events.jsonl")))


@pytest.mark.spark
def test_spark_engine_reproduces_the_seed_tables(spark: object) -> None:
    config = load_config(FIXTURE / "feeds.yaml")
    events = read_events(FIXTURE / "events.jsonl")
    spark_out = run_spark(config, events)
    _check(spark_out)
    assert spark_out == run_reference(config, events)  # the same events, in the same order
