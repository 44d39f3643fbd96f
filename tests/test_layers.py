"""Imports run one way: the package's module graph has no cycles but the ones listed here
(which may only shrink), and no module imports from a floor above its own but the edges
listed here.

Every import counts, at the top of a module or inside a function (a lazy import is still a
dependency), except those under ``if TYPE_CHECKING:`` (annotations only) and under
``if __name__ == "__main__":`` (the module run as a script). ``from package import name``
is an import of ``package.name`` when that is a module, else of ``package``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "daskstraggle"

#: The floors, lowest first (docs/architecture.md): a module may import from its own floor
#: and those below. Keys are the first name below ``daskstraggle``; the package itself is
#: the face above everything.
FLOORS = {
    **dict.fromkeys(("errors", "config", "options", "_registry", "_validation", "_resources",
                     "_declared_options", "_deprecation", "_lazy", "_version", "_progress",
                     "_block", "_packing", "_numba"), 1),
    **dict.fromkeys(("data", "problems", "_output"), 2),
    **dict.fromkeys(("coding", "latency", "methods", "balance"), 3),
    "engine": 4,
    "runtime": 5,
    **dict.fromkeys(("trace", "plot", "_plink_out", "_recovery", "_sgkit", "testing"), 6),
    **dict.fromkeys(("api", "estimators"), 7),
    **dict.fromkeys(("cli", "_cli_format", "_cli_genotypes", "_cli_lazy", "_cli_plot",
                     "_cli_simulate", "_entry", "__main__", "_worker_preload"), 8),
}

#: The import cycles still to break: none (issue 44 broke the last, in ``data/``: the
#: ``Matrix`` type and the backends' shared opening code sit below the backends and
#: ``open_matrix``). Any new cycle fails the test below.
KNOWN_CYCLES: list[set[str]] = []

#: The imports from a lower floor to a higher one still to remove: none (issue 44 moved the
#: run's lifecycle out of the runtime base class into ``runtime.lifecycle``, the trace's
#: rows into ``engine.recorder``, and the ``Result`` to the face). A deprecation alias
#: reaches its new place by name (``_deprecation``), which is no import. Any new upward
#: import fails the test below.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def _modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name below it."""
    names = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _skipped(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":``."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
                "TYPE_CHECKING", "typing.TYPE_CHECKING", "__name__ == '__main__'"):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


def import_graph(package: Path = PACKAGE, name: str = "daskstraggle") -> dict[str, set[str]]:
    """Each module's imports of the package's modules (names below the package)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _skipped(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [t if t.removeprefix(f"{name}.") in modules else node.module
                           for t in targets]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                inner = target.removeprefix(f"{name}.")
                if target.startswith(f"{name}.") and inner in modules and inner != module:
                    graph[module].add(inner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _floor(module: str) -> int:
    return FLOORS.get(module.split(".")[0], 9) if module else 9


def test_the_import_cycles_are_only_the_known_ones():
    found = sorted(map(sorted, cycles(import_graph())))
    assert found == sorted(map(sorted, KNOWN_CYCLES)), (
        "a new import cycle, or a known one changed or broken (then update KNOWN_CYCLES)")


def test_no_module_imports_from_a_floor_above_its_own_but_the_known_ones():
    upward = {(a, b) for a, targets in import_graph().items() for b in targets
              if _floor(a) < _floor(b)}
    assert upward == KNOWN_UPWARD


def test_data_and_problems_import_neither_the_other():
    """Both read and compute on the partition format (``_block``, ``_packing``) and load
    numba through ``_numba``, on the floor below them."""
    crossing = {(a, b) for a, targets in import_graph().items() for b in targets
                if {a.split(".")[0], b.split(".")[0]} == {"data", "problems"}}
    assert crossing == set()


def test_every_subpackage_and_top_level_module_has_a_floor():
    tops = {module.split(".")[0] for module in import_graph() if module}
    assert tops <= set(FLOORS), sorted(tops - set(FLOORS))


@pytest.mark.parametrize("files, expected", [
    ({"a.py": "from pkg import b\n", "b.py": "def f():\n    import pkg.a\n"}, [{"a", "b"}]),
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n",
      "b.py": "from pkg.a import x\n"}, []),
    ({"a.py": "import pkg.b\n", "b.py": "if __name__ == '__main__':\n    import pkg.a\n"}, []),
    ({"a.py": "from pkg.b import c\n", "b/__init__.py": "", "b/c.py": "from pkg import a\n"},
     [{"a", "b.c"}]),
])
def test_the_checker_finds_cycles_through_lazy_imports_only(tmp_path, files, expected):
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    assert sorted(map(sorted, cycles(import_graph(root, "pkg")))) == sorted(map(sorted, expected))
