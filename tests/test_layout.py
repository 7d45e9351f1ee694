"""The floor plan: an import graph of linc_core, orchestration, sweeps, faults and bench, built
from the code (every import statement, those inside functions and ``TYPE_CHECKING`` blocks
included), with no circle, no import from a lower layer to a higher one, no folder of more than
12 modules and no module of more than 400 lines.

    python -m tests.test_layout     # prints the graph's figures and every finding
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lower layers never import higher ones: linc_core < orchestration < sweeps < faults, bench.
LAYERS = {"linc_core": 0, "orchestration": 1, "sweeps": 2, "faults": 3, "bench": 3}
# Inside linc_core: the science below, what a run is (runs) above it, the commands on top.
CORE_FLOORS = {"linc_core.commands": 2, "linc_core.runs": 1}
MAX_MODULES_PER_FOLDER = 12
MAX_LINES = 400


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the layered packages."""
    found = {}
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts).removesuffix(".__init__")
            found[name] = path
    return found


def _targets(node: ast.AST, here: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` an import statement loads (``from a.b import c``: module
    ``a.b.c`` if there is one, else ``a.b``)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return {_deepest(name, modules) for name in names} - {None}
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        package = here if is_package else here.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}".rstrip(".")
    found = set()
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        found.add(candidate if candidate in modules else _deepest(base, modules))
    return found - {None}


def _deepest(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the layered packages it imports."""
    files = module_files()
    names = set(files)
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges |= _targets(node, name, is_package, names)
        graph[name] = edges - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    def layer(module: str) -> int:
        return LAYERS[module.split(".")[0]]

    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        for target in targets
        if layer(target) > layer(source)
        or (layer(target) == layer(source) and target.split(".")[0] != source.split(".")[0])
    )


def core_floor(module: str) -> int:
    return next((f for prefix, f in CORE_FLOORS.items() if module.startswith(prefix)), 0)


def upward_core_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside linc_core from a lower floor (the science) to a higher one."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in graph.items()
        if source.startswith("linc_core")
        for target in targets
        if target.startswith("linc_core") and core_floor(target) > core_floor(source)
    )


def crowded_folders() -> list[str]:
    folders: dict[Path, int] = {}
    for path in module_files().values():
        folders[path.parent] = folders.get(path.parent, 0) + 1
    return sorted(
        f"{folder.relative_to(ROOT)}: {count} modules"
        for folder, count in folders.items()
        if count > MAX_MODULES_PER_FOLDER
    )


def long_modules() -> list[str]:
    return sorted(
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in module_files().values()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    )


def test_the_import_graph_has_no_circle() -> None:
    assert circles(import_graph()) == []


def test_no_layer_imports_a_higher_one() -> None:
    assert upward_imports(import_graph()) == []


def test_linc_core_science_never_imports_its_runs_or_commands() -> None:
    assert upward_core_imports(import_graph()) == []


def test_no_folder_holds_more_than_twelve_modules() -> None:
    assert crowded_folders() == []


def test_no_module_is_longer_than_four_hundred_lines() -> None:
    assert long_modules() == []


def test_the_graph_is_built_from_every_import_statement() -> None:
    """The check can fail: it sees imports inside functions and type-only imports, resolves
    relative ones, and finds a circle and an upward import planted in a graph."""
    graph = import_graph()
    assert len(graph) > 150
    assert upward_core_imports({"linc_core.train.loop": {"linc_core.runs.plan"}}) == [
        "linc_core.train.loop -> linc_core.runs.plan"
    ]
    assert "linc_core.config" in graph["linc_core.model.policy"]
    planted = graph | {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert ["a", "b", "c"] in circles(planted)
    assert upward_imports({"linc_core.x": {"sweeps.y"}, "sweeps.y": set()}) == [
        "linc_core.x -> sweeps.y"
    ]
    tree = ast.parse("if TYPE_CHECKING:\n    from . import policy\ndef f():\n    from .x import y")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= _targets(node, "p.q", False, {"p.policy", "p.x", "p.x.y", "p.q"})
    assert found == {"p.policy", "p.x.y"}


if __name__ == "__main__":
    graph = import_graph()
    edges = sum(len(targets) for targets in graph.values())
    print(f"{len(graph)} modules, {edges} imports")
    for title, findings in (
        ("circles", [" <-> ".join(c) for c in circles(graph)]),
        ("upward imports", upward_imports(graph) + upward_core_imports(graph)),
        ("folders over 12 modules", crowded_folders()),
        ("modules over 400 lines", long_modules()),
    ):
        print(f"{title}: {len(findings)}")
        for finding in findings:
            print(f"  {finding}")
