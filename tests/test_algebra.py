"""The logical plan: pure description, no heavy imports, every node lowered."""

from __future__ import annotations

import subprocess
import sys

from roses_app.algebra.plan.operators import NODE_TYPES, Filter, Origin, Source, Union


def test_importing_the_algebra_loads_neither_pyspark_nor_lxml() -> None:
    code = (
        "import sys, roses_app.algebra, roses_app.algebra.reference.evaluator;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'lxml', 'elementpath')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_module_of_the_algebras_packages_loads_pyspark_nor_lxml() -> None:
    # the plan, the rules of time, the planner and the reference engine, __init__s too
    code = (
        "import importlib, pkgutil, sys, roses_app.algebra as a\n"
        "names = [m.name for m in pkgutil.walk_packages(a.__path__, 'roses_app.algebra.')]\n"
        "assert len(names) > 30, names\n"
        "for name in names: importlib.import_module(name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'lxml', 'elementpath')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_origins_do_not_take_part_in_equality() -> None:
    a = Filter(Source("s"), "title", origin=Origin("a.yaml", 3, "x", "x/filter"))
    b = Filter(Source("s"), "title", origin=Origin("b.yaml", 9, "y", "y/filter"))
    assert a == b
    assert hash(a) == hash(b)


def test_walk_visits_every_node() -> None:
    plan = Union((Filter(Source("a"), "true()"), Source("b")))
    assert [type(n).__name__ for n in plan.walk()] == ["Union", "Filter", "Source", "Source"]


def test_every_node_type_has_a_spark_lowering() -> None:
    from roses_app.spark.lower import lowered_types

    assert lowered_types() == set(NODE_TYPES)
