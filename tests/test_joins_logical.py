"""The product and join tables of seed 002, time by time (logical semantics)."""

from __future__ import annotations

import pytest
import seed_tables as seed

from roses_app.algebra.reference.nested import join_row

F1, F2, MATCHES = seed.F1, seed.F2, seed.MATCHES


def pred(i1: str, i2: str) -> bool:
    return (i1, i2) in MATCHES


def compose(i1: str, i2: str) -> str:
    return f"{i1}·{i2}"


def run(kind: str) -> dict[int, list[str]]:
    return {t: join_row(F1[t], F2[t], kind, pred, compose) for t in F1}


def test_product_table() -> None:
    assert run("product") == seed.PRODUCT  # an empty side is λ: d1·λ = d1


def test_inner_join_table() -> None:
    assert run("inner") == seed.INNER


def test_left_outer_join_table() -> None:
    assert run("left") == seed.LEFT_OUTER


def test_full_outer_join_table() -> None:
    assert run("full") == seed.FULL_OUTER


def test_inner_join_is_a_selection_of_the_product() -> None:
    # Seed 002: F1 ⋈inner,pred F2 = σpred(F1 × F2), at every time where both sides have items.
    for t in (1, 3, 5):
        product = join_row(F1[t], F2[t], "product", pred, lambda a, b: (a, b))
        assert [f"{a}·{b}" for a, b in product if pred(a, b)] == run("inner")[t]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown join kind"):
        join_row([], [], "outer", pred, compose)
