"""The product and join tables of seed 002, time by time (logical semantics)."""

from __future__ import annotations

import pytest

from roses_app.algebra.nested import join_row

F1 = {
    1: ["a1", "b1", "c1"],
    2: ["d1", "e1"],
    3: ["f1", "g1", "h1", "i1"],
    4: [],
    5: ["j1", "k1", "l1"],
}
F2 = {
    1: ["a2", "b2", "c2"],
    2: [],
    3: ["d2", "e2", "f2", "g2"],
    4: ["h2", "i2"],
    5: ["j2", "k2", "l2"],
}
# pred(i1, i2) as the inner join table shows it
MATCHES = {
    ("a1", "c2"), ("b1", "a2"), ("b1", "b2"), ("c1", "a2"),
    ("g1", "d2"), ("g1", "e2"), ("g1", "f2"), ("h1", "d2"), ("i1", "f2"),
    ("j1", "j2"), ("j1", "k2"), ("l1", "k2"),
}  # fmt: skip


def pred(i1: str, i2: str) -> bool:
    return (i1, i2) in MATCHES


def compose(i1: str, i2: str) -> str:
    return f"{i1}·{i2}"


def run(kind: str) -> dict[int, list[str]]:
    return {t: join_row(F1[t], F2[t], kind, pred, compose) for t in F1}


def test_product_table() -> None:
    got = run("product")
    assert got[1] == [f"{a}·{b}" for a in F1[1] for b in F2[1]]
    assert got[2] == ["d1", "e1"]  # F2(2) is empty: d1·λ = d1
    assert got[3] == [f"{a}·{b}" for a in F1[3] for b in F2[3]]
    assert got[4] == ["h2", "i2"]
    assert got[5] == [f"{a}·{b}" for a in F1[5] for b in F2[5]]


def test_inner_join_table() -> None:
    assert run("inner") == {
        1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
        2: [],
        3: ["g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2"],
        4: [],
        5: ["j1·j2", "j1·k2", "l1·k2"],
    }


def test_left_outer_join_table() -> None:
    assert run("left") == {
        1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
        2: ["d1", "e1"],
        3: ["f1", "g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2"],
        4: [],
        5: ["j1·j2", "j1·k2", "k1", "l1·k2"],
    }


def test_full_outer_join_table() -> None:
    assert run("full") == {
        1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
        2: ["d1", "e1"],
        3: ["f1", "g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2", "g2"],
        4: ["h2", "i2"],
        5: ["j1·j2", "j1·k2", "k1", "l1·k2", "l2"],
    }


def test_inner_join_is_a_selection_of_the_product() -> None:
    # Seed 002: F1 ⋈inner,pred F2 = σpred(F1 × F2), at every time where both sides have items.
    for t in (1, 3, 5):
        product = join_row(F1[t], F2[t], "product", pred, lambda a, b: (a, b))
        assert [f"{a}·{b}" for a, b in product if pred(a, b)] == run("inner")[t]


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown join kind"):
        join_row([], [], "outer", pred, compose)
