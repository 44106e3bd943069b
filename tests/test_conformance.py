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

from roses_app.config import load_config
from roses_app.replay import Outputs, read_events, run_reference, run_spark

FIXTURE = Path(__file__).parent / "data" / "replay" / "seed_time"
TITLE = re.compile(r"<title>(.*?)</title>")

Table = dict[int, str]  # time -> comma-separated items


def _letters(rows: dict[int, str]) -> Table:
    return {t: ",".join(v) for t, v in rows.items()}


# "Fenêtres time-based": ω_time,3(F) and ω_time,2,0,4,1(F) (times 1..9)
TIME_3 = _letters({1: "abc", 2: "abcde", 3: "abcdefghi", 4: "defghijk", 5: "fghijk",
                   6: "jklmno", 7: "lmnopqr", 8: "lmnopqr", 9: "pqr"})  # fmt: skip
TIME_2041 = _letters({1: "abc", 2: "abc", 3: "abc", 4: "abc", 5: "jk", 6: "jk", 7: "jk",
                      8: "jk"})  # fmt: skip
# "Fenêtres count-based": ω_count,8(F)
COUNT_8 = _letters({1: "abc", 2: "abcde", 3: "abcdefghi", 4: "defghijk", 5: "defghijk",
                    6: "fghijklmno", 7: "jklmnopqr", 8: "jklmnopqr", 9: "jklmnopqr"})  # fmt: skip
# "Delta insert" and "Delta delete" of ω_time,3(F) (times 1..11)
DELTA_INSERT = _letters({1: "abc", 2: "de", 3: "fghi", 4: "jk", 6: "lmno", 7: "pqr"})
DELTA_DELETE = _letters({4: "abc", 5: "de", 6: "fghi", 7: "jk", 9: "lmno", 10: "pqr"})


def _pairs(*pairs: str) -> str:
    return ",".join(p.replace(".", "·") for p in pairs)


def _product(left: str, right: str) -> str:
    return ",".join(f"{a}·{b}" for a in left.split() for b in right.split())


# "Produit cartésien" and the three "Jointure" tables
PRODUCT = {
    1: _product("a1 b1 c1", "a2 b2 c2"),
    2: "d1,e1",
    3: _product("f1 g1 h1 i1", "d2 e2 f2 g2"),
    4: "h2,i2",
    5: _product("j1 k1 l1", "j2 k2 l2"),
}
INNER = {
    1: _pairs("a1.c2", "b1.a2", "b1.b2", "c1.a2"),
    3: _pairs("g1.d2", "g1.e2", "g1.f2", "h1.d2", "i1.f2"),
    5: _pairs("j1.j2", "j1.k2", "l1.k2"),
}
LEFT_OUTER = {
    1: INNER[1],
    2: "d1,e1",
    3: "f1," + INNER[3],
    5: _pairs("j1.j2", "j1.k2", "k1", "l1.k2"),
}
FULL_OUTER = {
    1: INNER[1],
    2: "d1,e1",
    3: "f1," + INNER[3] + ",g2",
    4: "h2,i2",
    5: _pairs("j1.j2", "j1.k2", "k1", "l1.k2", "l2"),
}
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
