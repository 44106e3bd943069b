"""The import rules of docs/architecture.md, read statically (ast, nothing imported).

* No import cycle between the modules of ``roses_app``: imports at the top of a module
  and inside functions count, and so do the package ``__init__`` modules an import runs,
  and imports under ``if TYPE_CHECKING:`` (they never run, but two modules naming each
  other's types are one piece of code in two files).
* Every import (``TYPE_CHECKING`` ones too) is allowed by the table of layers in
  docs/architecture.md.

(That ``import roses_app.algebra`` loads neither pyspark nor lxml is tested by running it:
tests/test_algebra.py.)
"""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT = "roses_app"
DOC = REPO / "docs" / "architecture.md"

TOP, LAZY, TYPES = "top level", "in a function", "under TYPE_CHECKING"
TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module imported (the package when a name is not a module)
    kind: str  # TOP, LAZY or TYPES
    file: str  # the importer's path in the repository
    line: int

    def where(self) -> str:
        return f"{self.file}:{self.line}, {self.kind}"


def module_files(root: Path, package: str = ROOT) -> dict[str, Path]:
    """Every module of ``package`` (a folder under ``root``) by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _guarded_by_type_checking(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in TYPE_CHECKING:
            for statement in node.body:
                inside.update(id(n) for n in ast.walk(statement))
    return inside


def _in_functions(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(n) for n in ast.walk(node))
    return inside


def _names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement imports (a module, or a module's name)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    return [f"{source}.{alias.name}" for alias in node.names]


def imports_of(root: Path, modules: dict[str, Path], package: str = ROOT) -> list[Import]:
    """Every import of a module of ``package`` by a module of ``package``."""
    found: list[Import] = []
    for module, path in modules.items():
        file = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        typing_only, lazy = _guarded_by_type_checking(tree), _in_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            kind = TYPES if id(node) in typing_only else LAZY if id(node) in lazy else TOP
            for name in _names(module, path.name == "__init__.py", node):
                while name not in modules and "." in name:
                    name = name.rpartition(".")[0]  # a name defined in a module
                if name in modules and name != module and name.split(".")[0] == package:
                    found.append(Import(module, name, kind, file, node.lineno))
    return found


# -- cycles ------------------------------------------------------------------------------


def import_graph(modules: dict[str, Path], imports: list[Import]) -> dict[str, dict[str, Import]]:
    """Who imports whom: each import (for types only too), and the ``__init__`` of every
    package above its target that is not above the importer (Python runs those first)."""
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports:
        parts = imp.target.split(".")
        for n in range(2, len(parts) + 1):
            above = ".".join(parts[:n])
            if above in modules and not f"{imp.module}.".startswith(f"{above}."):
                graph[imp.module].setdefault(above, imp)
    return graph


Cycle = list[tuple[str, Import]]  # each module on the way and the import that reaches it


def cycles(graph: dict[str, dict[str, Import]]) -> list[Cycle]:
    """One shortest cycle through each group of modules that import each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:  # Tarjan's strongly connected components, iteratively
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_shortest_cycle(graph, group) for group in groups]


def _shortest_cycle(graph: dict[str, dict[str, Import]], group: set[str]) -> Cycle:
    start = min(group)
    came: dict[str, tuple[str, Import]] = {}  # a module: the one before it, the import
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ, imp in sorted(graph[node].items()):
            if succ not in group:
                continue
            if succ == start:
                path = [(succ, imp)]
                while node != start:
                    before, reached = came[node]
                    path.insert(0, (node, reached))
                    node = before
                return path
            if succ not in came:
                came[succ] = (node, imp)
                queue.append(succ)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def describe(cycle: Cycle) -> str:
    steps = [cycle[-1][0], *(f"{module} ({imp.where()})" for module, imp in cycle)]
    return "import cycle: " + " -> ".join(steps)


# -- the table of layers -----------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # dotted names: a package covers its submodules
    allowed: tuple[tuple[str, bool, str], ...]  # (name, is a module, LAZY/TYPES/"")
    row: str  # the table's line, for messages


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _dotted(file: str) -> str:
    """``algebra/`` → ``roses_app.algebra``; ``publish/console/app.py`` → ..."""
    stem = file.rstrip("/").removesuffix(".py")
    return ".".join([ROOT, *stem.split("/")])


def parse_layers(text: str) -> list[Layer]:
    """The rows of the table whose header starts ``| Layer | Modules |``."""
    lines = text.splitlines()
    start = next(
        (i for i, line in enumerate(lines) if _cells(line)[:2] == ["Layer", "Modules"]), None
    )
    assert start is not None, "docs/architecture.md has no table headed | Layer | Modules |"
    header = _cells(lines[start])
    allowed_column = header.index("May import")
    layers: list[Layer] = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        modules = tuple(_dotted(m) for m in re.findall(r"`([^`]+)`", cells[1]))
        allowed = []
        for entry in filter(None, (e.strip() for e in cells[allowed_column].split(","))):
            match = re.fullmatch(r"(`?)([\w./]+)`?\s*(?:\((lazy|types)\))?", entry)
            assert match, f"cannot read {entry!r} in the row {line}"
            quoted, name, how = match.groups()
            qualifier = {"lazy": LAZY, "types": TYPES}.get(how or "", "")
            allowed.append((_dotted(name) if quoted else name, bool(quoted), qualifier))
        layers.append(Layer(cells[0], modules, tuple(allowed), line.strip()))
    return layers


def _covers(name: str, module: str) -> bool:
    return module == name or module.startswith(f"{name}.")


def layer_of(layers: list[Layer], module: str) -> Layer | None:
    """The layer that lists ``module`` or the nearest package above it."""
    best: tuple[int, Layer] | None = None
    for layer in layers:
        for name in layer.modules:
            if _covers(name, module) and (best is None or len(name) > best[0]):
                best = (len(name), layer)
    return None if best is None else best[1]


def allowed(layers: list[Layer], imp: Import) -> bool:
    mine, theirs = layer_of(layers, imp.module), layer_of(layers, imp.target)
    if mine is None or theirs is None or mine is theirs:
        return mine is theirs
    for name, is_module, qualifier in mine.allowed:
        reaches = _covers(name, imp.target) if is_module else name == theirs.name
        how = {"": (TOP, LAZY, TYPES), LAZY: (LAZY, TYPES), TYPES: (TYPES,)}[qualifier]
        if reaches and imp.kind in how:
            return True
    return False


# -- the tests ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return module_files(REPO)


@pytest.fixture(scope="module")
def imports(modules: dict[str, Path]) -> list[Import]:
    return imports_of(REPO, modules)


@pytest.fixture(scope="module")
def layers() -> list[Layer]:
    return parse_layers(DOC.read_text(encoding="utf-8"))


def test_no_module_imports_itself_through_others(
    modules: dict[str, Path], imports: list[Import]
) -> None:
    found = [describe(cycle) for cycle in cycles(import_graph(modules, imports))]
    assert not found, "\n".join(found)


def test_the_cycle_check_finds_a_cycle_and_names_it(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nimport pkg.c\n")
    (package / "b.py").write_text("def f():\n    from pkg.sub import thing\n")
    (package / "sub" / "__init__.py").write_text("from pkg.sub.x import thing\n")
    (package / "sub" / "x.py").write_text("from pkg import a\nthing = 1\n")
    (package / "c.py").write_text("from . import b\n")
    (package / "d.py").write_text("if TYPE_CHECKING:\n    from pkg import a\n")
    (package / "e.py").write_text("from pkg import d\n")
    found = module_files(tmp_path, "pkg")
    (cycle,) = cycles(import_graph(found, imports_of(tmp_path, found, "pkg")))
    text = describe(cycle)
    assert text.startswith("import cycle: pkg.a -> pkg.c (")
    assert "-> pkg.sub (pkg/b.py:2, in a function) -> pkg.sub.x (" in text
    assert text.endswith("-> pkg.a (pkg/sub/x.py:1, top level)")


def test_a_cycle_through_imports_for_types_only_is_one_too(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hub.py").write_text("from pkg import delivery\n")
    (package / "delivery.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.hub import Hub\n"
    )
    found = module_files(tmp_path, "pkg")
    (cycle,) = cycles(import_graph(found, imports_of(tmp_path, found, "pkg")))
    assert "pkg.delivery (pkg/hub.py:1, top level)" in describe(cycle)
    assert "pkg.hub (pkg/delivery.py:3, under TYPE_CHECKING)" in describe(cycle)


def test_every_module_is_in_one_layer(modules: dict[str, Path], layers: list[Layer]) -> None:
    names = [layer.name for layer in layers]
    assert len(names) == len(set(names)), names
    listed = [name for layer in layers for name in layer.modules]
    assert len(listed) == len(set(listed)), listed
    assert not [name for name in listed if name not in modules], "listed, not found"
    assert not [m for m in modules if m != ROOT and layer_of(layers, m) is None]
    for layer in layers:
        for name, is_module, _ in layer.allowed:
            assert name in modules if is_module else name in names, (name, layer.row)


def test_every_import_is_allowed_by_the_table(imports: list[Import], layers: list[Layer]) -> None:
    wrong = [
        f"{imp.module} imports {imp.target} ({imp.where()}), which its row does not "
        f"allow:\n    {row.row if (row := layer_of(layers, imp.module)) else '(no row)'}"
        for imp in imports
        if not allowed(layers, imp)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_table_check_refuses_what_the_row_does_not_allow(layers: list[Layer]) -> None:
    def check(module: str, target: str, kind: str = TOP) -> bool:
        return allowed(layers, Import(f"{ROOT}.{module}", f"{ROOT}.{target}", kind, "x.py", 1))

    assert check("store", "items")
    assert not check("store", "spark.runner")
    assert not check("store", "spark.runner", TYPES)
    assert check("algebra.reference.evaluator", "xmlfn", LAZY)
    assert check("algebra.reference.evaluator", "xmlfn", TYPES)
    assert not check("algebra.reference.evaluator", "xmlfn")
    assert check("daemon_console", "publish.console.deps")
    assert not check("publish.catalog", "daemon")
    assert not check("publish.console.app", "daemon_console", TYPES)


def test_the_algebras_packages_are_layered_plan_time_then_planner_and_reference(
    layers: list[Layer],
) -> None:
    """A nested folder is a row of its own: the plan, the rules of time, the planner and
    the reference engine, each importing only the ones below it."""

    def check(module: str, target: str, kind: str = TOP) -> bool:
        return allowed(layers, Import(f"{ROOT}.{module}", f"{ROOT}.{target}", kind, "x.py", 1))

    assert layer_of(layers, f"{ROOT}.algebra.time.windows") is not layer_of(
        layers, f"{ROOT}.algebra.plan.operators"
    )
    assert check("algebra.time.windows", "algebra.plan.operators")
    assert check("algebra.planner.explain", "algebra.time.eventtime")
    assert check("algebra.reference.evaluator", "algebra.time.lateness")
    assert not check("algebra.plan.operators", "algebra.time.windows", TYPES)
    assert not check("algebra.time.windows", "algebra.planner.globalplan", LAZY)
    assert not check("algebra.time.lateness", "algebra.reference.registry")
    assert not check("algebra.planner.rewrite", "algebra.reference.evaluator", LAZY)
    assert not check("algebra.reference.evaluator", "algebra.planner.globalplan")
    assert not check("spark.lower", "algebra.reference.evaluator")
