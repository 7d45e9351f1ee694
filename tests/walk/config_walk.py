"""How far a reader travels to follow a sweep's config: a walk of the code from
``orchestration.experiment.ablation.run_ablation``, following every call that receives
``config`` or a value derived from it, counting the modules it enters and the returns to a
module it had left.

    python -m tests.walk.config_walk     # the walk's path, the modules and the returns

The walk reads the code (no import, no run): in each function it follows, a name is tainted
once it is assigned from an expression holding a tainted name (``spec = config.ablation``,
``rows = [result_row(r) for r in results]``); a call is followed when an argument is tainted
(or its receiver is) and the callee is a function, method or class of linc's packages,
resolved through the imports, the annotations of parameters, returns and class fields, and the
classes assigned to names. Entering a ``with`` on a linc object follows its ``__enter__`` and
``__exit__``; a lambda's or a nested function's calls are followed where it is written; the
error a ``raise`` builds is not followed (its arguments are). A definition is read once, as a
reader would: the first call that reaches a definition in module B from module A != B is one
entry into B and one return to A; later calls of it are not followed again.

The walk through one function body is tests/walk/body.py; the guard on the figures
(the limits and their history) is tests/walk/test_config_walk.py.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.test_layout import module_files
from tests.walk.body import Body

START = ("orchestration.experiment.ablation", "run_ablation", "config")
DRIVER = ("orchestration", "sweeps")  # the layers walked; linc_core's calls are the science's


@dataclass
class Module:
    name: str
    tree: ast.Module
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # local -> (module, name)
    defs: dict[str, ast.AST] = field(default_factory=dict)


def load(files: dict[str, Path] | None = None) -> dict[str, Module]:
    files = files or module_files()
    modules = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        module = Module(name, tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):  # imports anywhere (inside functions too)
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package
                    for _ in range(node.level - 1):
                        up = up.rpartition(".")[0]
                    base = f"{up}.{base}".rstrip(".")
                for alias in node.names:
                    module.names[alias.asname or alias.name] = (base, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        module.names[alias.asname] = (alias.name, "")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
                module.defs[node.name] = node
        modules[name] = module
    return modules


@dataclass
class Walk:
    modules: dict[str, Module]
    driver: tuple[str, ...] = DRIVER
    path: list[str] = field(default_factory=list)  # "-> module.function" and "<- module"
    entered: list[str] = field(default_factory=list)
    done: set[tuple[str, str]] = field(default_factory=set)
    read: set[tuple[str, int]] = field(default_factory=set)  # definitions looked up once
    edges: set[tuple[str, str]] = field(default_factory=set)  # (caller module, callee module)

    @property
    def returns(self) -> int:
        """Returns to a module left: one per pair of modules the walk went from and back to."""
        return len(self.edges)

    # -- resolution ------------------------------------------------------------------------
    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST] | None:
        """The definition ``name`` means in ``module`` (through imports and re-exports)."""
        found = self.modules.get(module)
        if found is None or depth > 8:
            return None
        if name in found.defs:
            return module, found.defs[name]
        if name in found.names:
            source, original = found.names[name]
            if f"{source}.{original}" in self.modules and original:
                return None  # a module, not a definition
            return self.resolve(source, original, depth + 1)
        return None

    def module_alias(self, module: str, name: str) -> str | None:
        found = self.modules[module].names.get(name)
        if found is None:
            return None
        dotted = ".".join(p for p in found if p)
        return dotted if dotted in self.modules else None

    def annotation_class(self, module: str, node: ast.AST | None):
        """The linc class an annotation names (``X``, ``X | None``, ``"X"``), or None."""
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(node, ast.BinOp):
            return self.annotation_class(module, node.left) or self.annotation_class(
                module, node.right
            )
        if isinstance(node, ast.Subscript):  # Optional[X]
            return self.annotation_class(module, node.slice)
        if isinstance(node, ast.Name):
            found = self.resolve(module, node.id)
            if found is not None and isinstance(found[1], ast.ClassDef):
                return found
        return None

    def member(self, cls: tuple[str, ast.ClassDef], name: str):
        """A method (``(module, FunctionDef)``) or an attribute's class, looked up in ``cls``
        and its linc bases: ``("method", ...)`` or ``("type", ...)``."""
        module, node = cls
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == name:
                if any(_is_property(d) for d in item.decorator_list):
                    return "type", self.annotation_class(module, item.returns)
                return "method", (module, item)
            if (
                isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and item.target.id == name
            ):
                return "type", self.annotation_class(module, item.annotation)
        init = next(
            (i for i in node.body if isinstance(i, ast.FunctionDef) and i.name == "__init__"), None
        )
        for stmt in ast.walk(init) if init else ():
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Attribute)
                and stmt.target.attr == name
            ):
                return "type", self.annotation_class(module, stmt.annotation)
        for base in node.bases:
            if isinstance(base, ast.Name):
                found = self.resolve(module, base.id)
                if found is not None and isinstance(found[1], ast.ClassDef):
                    result = self.member(found, name)
                    if result is not None:
                        return result
        return None

    # -- the walk --------------------------------------------------------------------------
    def call(self, here: str, target: tuple[str, ast.AST], tainted: set[str], self_cls=None):
        module, node = target
        if not module.startswith(self.driver) or (module, id(node)) in self.read:
            return  # linc_core's, or read before: the reader knows it
        self.read.add((module, id(node)))
        if module != here:
            self.path.append(f"-> {module}.{getattr(node, 'name', '?')}")
            if module not in self.entered:
                self.entered.append(module)
            self.edges.add((here, module))
        if isinstance(node, ast.ClassDef):
            for name in ("__init__", "__post_init__"):
                found = self.member((module, node), name)
                if found and found[0] == "method":
                    self.function(found[1], tainted | {"self"}, (module, node))
        else:
            self.function(target, tainted, self_cls)
        if module != here:
            self.path.append(f"<- {here}")

    def function(self, target: tuple[str, ast.AST], tainted: set[str], self_cls=None) -> None:
        module, node = target
        key = (module, f"{id(node)}")
        if key in self.done or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        self.done.add(key)
        Body(self, module, tainted, node, self_cls).run(node.body)


def _is_property(decorator: ast.AST) -> bool:
    return isinstance(decorator, ast.Name) and decorator.id in ("property", "cached_property")


def walk(
    start: tuple[str, str, str] = START,
    modules: dict[str, Module] | None = None,
    driver: tuple[str, ...] = DRIVER,
) -> Walk:
    """The walk from function ``start[1]`` of module ``start[0]`` with ``start[2]`` tainted,
    entering the modules of the packages ``driver``."""
    modules = modules or load()
    module, function, name = start
    found = Walk(modules, driver)
    found.entered.append(module)
    found.path.append(f"{module}.{function}")
    found.function((module, modules[module].defs[function]), {name})
    return found


def returns_by_module(found: Walk) -> dict[str, int]:
    counts: dict[str, int] = {}
    for caller, _ in found.edges:
        counts[caller] = counts.get(caller, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def main() -> None:
    """Print the walk from START: its figures, the modules entered, the returns and the path."""
    result = walk()
    print(f"following {START[2]} from {START[0]}.{START[1]}:")
    print(f"  modules entered: {len(result.entered)}; returns to a module left: {result.returns}")
    for name in result.entered:
        print(f"    {name}")
    print("  returns by module:", returns_by_module(result))
    print("  path:")
    depth = 0
    for step in result.path:
        if step.startswith("<- "):
            depth -= 1
        print("    " + "  " * max(depth, 0) + step)
        if step.startswith("-> "):
            depth += 1


if __name__ == "__main__":
    main()
