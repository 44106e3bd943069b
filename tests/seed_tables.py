"""The worked tables of seed 002 and seed 000's windowed grouping example, written
once, as the seeds print them: time → the items there (one letter per item for the
window and delta tables; named items for the join tables).

The tests of the window functions, of the logical joins and delta, of the reference
evaluator's and Spark's operators, and the conformance test all read them here.
"""

from __future__ import annotations

# F of the window tables ("Fenêtres"): no item at 5
F = {1: "abc", 2: "de", 3: "fghi", 4: "jk", 6: "lmno", 7: "pqr"}

# ω_time,3(F), rows 1..9 (the δ tables' F column: 8 and 9 too, then empty)
TIME_3 = {
    1: "abc",
    2: "abcde",
    3: "abcdefghi",
    4: "defghijk",
    5: "fghijk",
    6: "jklmno",
    7: "lmnopqr",
    8: "lmnopqr",
    9: "pqr",
}
# ω_time,2,0,4,1(F): w=2, d=0, f=4, t0=1, rows 1..8 (9: empty)
TIME_2_0_4_1 = {1: "abc", 2: "abc", 3: "abc", 4: "abc", 5: "jk", 6: "jk", 7: "jk", 8: "jk"}
# ω_count,8(F), rows 1..9
COUNT_8 = {
    1: "abc",
    2: "abcde",
    3: "abcdefghi",
    4: "defghijk",
    5: "defghijk",
    6: "fghijklmno",
    7: "jklmnopqr",
    8: "jklmnopqr",
    9: "jklmnopqr",
}
# δ⁺ and δ⁻ of ω_time,3(F): the times with an output
DELTA_INSERT = {1: "abc", 2: "de", 3: "fghi", 4: "jk", 6: "lmno", 7: "pqr"}
DELTA_DELETE = {4: "abc", 5: "de", 6: "fghi", 7: "jk", 9: "lmno", 10: "pqr"}

# Seed 000: items 1..8, key = parity, window 3
FLAMESTREAM = ["1", "2", "1|3", "2|4", "1|3|5", "2|4|6", "3|5|7", "4|6|8"]

# The product and join tables ("Produit cartésien", "Jointure")
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
PRODUCT = {
    t: [f"{a}·{b}" for a in F1[t] for b in F2[t]] if F1[t] and F2[t] else [*F1[t], *F2[t]]
    for t in F1
}
INNER = {
    1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
    2: [],
    3: ["g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2"],
    4: [],
    5: ["j1·j2", "j1·k2", "l1·k2"],
}
LEFT_OUTER = {
    1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
    2: ["d1", "e1"],
    3: ["f1", "g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2"],
    4: [],
    5: ["j1·j2", "j1·k2", "k1", "l1·k2"],
}
FULL_OUTER = {
    1: ["a1·c2", "b1·a2", "b1·b2", "c1·a2"],
    2: ["d1", "e1"],
    3: ["f1", "g1·d2", "g1·e2", "g1·f2", "h1·d2", "i1·f2", "g2"],
    4: ["h2", "i2"],
    5: ["j1·j2", "j1·k2", "k1", "l1·k2", "l2"],
}
