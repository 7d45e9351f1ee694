"""How far a reader travels to follow a sweep's config: a walk of the code from
``orchestration.experiment.ablation.run_ablation``, following every call that receives
``config`` or a value derived from it, counting the modules it enters and the returns to a
module it had left.

    python -m tests.test_config_walk     # the walk's path, the modules and the returns

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
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tests.test_layout import module_files

START = ("orchestration.experiment.ablation", "run_ablation", "config")
DRIVER = ("orchestration", "sweeps")  # the layers walked; linc_core's calls are the science's
# Measured after issue 35 (one Sweep, SweepFolder, SweepRuns): 26 modules, 31 returns; before
# it 25 and 31 (the walk follows the config into every room the sweep uses: storage, seal,
# tracking, Ray, report). The target, 12 and 12, is not reached: these hold the line.
# Issue 38 added the main table and time to quality: 28 and 34. Then the restore path became
# one read, decide, one write (tune_state.check_state, SweepFolder.read_all/write_all) with the
# seal record beside it, the Tune callbacks one list (experiment.callbacks), and the sweep's
# report a function of its runs (report.sweep_report: compare_to read from the parent run's
# params, so the config no longer flows into the report): 22 modules, 27 returns. Most returns
# left are to the Sweep itself (11), which calls each step of the lifecycle in turn.
MAX_MODULES = 22
MAX_RETURNS = 27


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


class Body:
    """The walk through one function body: its tainted names and the classes of its names."""

    def __init__(self, walk: Walk, module: str, tainted: set[str], node, self_cls) -> None:
        self.walk, self.module = walk, module
        self.tainted = set(tainted)
        self.types: dict[str, tuple[str, ast.ClassDef]] = {}
        args = node.args
        params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        for arg in params:
            cls = walk.annotation_class(module, arg.annotation)
            if cls is not None:
                self.types[arg.arg] = cls
        if self_cls is not None and params:
            self.types[params[0].arg] = self_cls
            if "self" in tainted:
                self.tainted.add(params[0].arg)

    def run(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.run(node.body)  # a closure: its calls where it is written
            return
        if isinstance(node, ast.ClassDef):
            return
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            for argument in [*node.exc.args, *(k.value for k in node.exc.keywords)]:
                self.expression(argument)  # the error's class is no step of the walk
            return
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            value = node.value
            if value is not None:
                self.expression(value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            cls = self.class_of(value) if value is not None else None
            if isinstance(node, ast.AnnAssign):
                cls = self.walk.annotation_class(self.module, node.annotation) or cls
            for target in targets:
                self.bind(target, value is not None and self.is_tainted(value), cls)
            return
        if isinstance(node, ast.For | ast.AsyncFor):
            self.expression(node.iter)
            self.bind(node.target, self.is_tainted(node.iter), None)
            self.run(node.body + node.orelse)
            return
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                self.expression(item.context_expr)
                cls = self.class_of(item.context_expr)
                tainted = self.is_tainted(item.context_expr)
                enter = None
                if cls is not None and tainted:
                    for name in ("__enter__", "__exit__"):
                        found = self.walk.member(cls, name)
                        if found and found[0] == "method":
                            self.walk.call(self.module, found[1], {"self"}, cls)
                            enter = enter or (found if name == "__enter__" else None)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, tainted, cls)
            self.run(node.body)
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expression(child)
            elif isinstance(child, ast.stmt):
                self.statement(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                self.run(child.body)

    def bind(self, target: ast.AST, tainted: bool, cls) -> None:
        if isinstance(target, ast.Name):
            if tainted:
                self.tainted.add(target.id)
            if cls is not None:
                self.types[target.id] = cls
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self.bind(element, tainted, None)
        elif isinstance(target, ast.Attribute | ast.Subscript) and tainted:
            base = target
            while isinstance(base, ast.Attribute | ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                self.tainted.add(base.id)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, tainted, None)

    def is_tainted(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in self.tainted for n in ast.walk(node)) or any(
            isinstance(n, ast.NamedExpr) for n in ast.walk(node)
        )

    def class_of(self, node: ast.AST | None):
        """The linc class of an expression's value, where the code says it."""
        if isinstance(node, ast.Name):
            return self.types.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.class_of(node.value)
            if owner is not None:
                found = self.walk.member(owner, node.attr)
                return found[1] if found and found[0] == "type" else None
            return None
        if isinstance(node, ast.Call):
            target = self.callee(node)
            if target is None:
                return None
            module, definition = target[0]
            if isinstance(definition, ast.ClassDef):
                return module, definition
            cls = self.walk.annotation_class(module, getattr(definition, "returns", None))
            if cls is None and getattr(definition.returns, "id", None) == "Self" and target[1]:
                return target[1]
            return cls
        return None

    def callee(self, node: ast.Call):
        """((module, definition), the receiver's class or None) of a call, or None."""
        func = node.func
        if isinstance(func, ast.Name):
            found = self.walk.resolve(self.module, func.id)
            return (found, None) if found else None
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name):
                alias = self.walk.module_alias(self.module, func.value.id)
                if alias is not None:
                    found = self.walk.resolve(alias, func.attr)
                    return (found, None) if found else None
                if func.value.id not in self.types:
                    found = self.walk.resolve(self.module, func.value.id)
                    if found is not None and isinstance(found[1], ast.ClassDef):
                        member = self.walk.member(found, func.attr)  # Class.classmethod()
                        if member and member[0] == "method":
                            return member[1], found
                        return None
            owner = self.class_of(func.value)
            if owner is not None:
                member = self.walk.member(owner, func.attr)
                if member and member[0] == "method":
                    return member[1], owner
        return None

    def expression(self, node: ast.AST) -> None:
        """Follow the calls in ``node``, innermost (evaluated first) first."""
        if isinstance(node, ast.Lambda):
            self.expression(node.body)
            return
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for generator in node.generators:
                self.expression(generator.iter)
                self.bind(generator.target, self.is_tainted(generator.iter), None)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expression(child)
            elif isinstance(child, ast.keyword):
                self.expression(child.value)
        if not isinstance(node, ast.Call):
            return
        arguments = [*node.args, *(k.value for k in node.keywords)]
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        receiver_tainted = receiver is not None and self.is_tainted(receiver)
        if not (receiver_tainted or any(self.is_tainted(a) for a in arguments)):
            return
        target = self.callee(node)
        if target is None:
            return
        (module, definition), owner = target
        tainted = self.parameters(definition, node, owner is not None and receiver is not None)
        if receiver_tainted and owner is not None:
            tainted.add("self")
        self.walk.call(self.module, (module, definition), tainted, owner)

    def parameters(self, definition: ast.AST, node: ast.Call, bound: bool) -> set[str]:
        """The callee's parameters that receive a tainted argument."""
        if isinstance(definition, ast.ClassDef):
            init = next(
                (
                    i
                    for i in definition.body
                    if isinstance(i, ast.FunctionDef) and i.name == "__init__"
                ),
                None,
            )
            if init is None:  # a dataclass: its fields
                return {"self"} if self.is_tainted(node) else set()
            definition, bound = init, True
        args = definition.args
        positional = [a.arg for a in [*args.posonlyargs, *args.args]]
        if bound or (positional[:1] in (["self"], ["cls"])):
            positional = positional[1:]
        tainted = set()
        for name, value in zip(positional, node.args, strict=False):
            if self.is_tainted(value):
                tainted.add(name)
        if any(isinstance(a, ast.Starred) and self.is_tainted(a) for a in node.args):
            tainted |= set(positional)
        for keyword in node.keywords:
            if self.is_tainted(keyword.value):
                if keyword.arg is None:
                    tainted |= set(positional) | {a.arg for a in args.kwonlyargs}
                else:
                    tainted.add(keyword.arg)
        return tainted


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


def test_following_an_ablations_config_stays_in_a_few_modules() -> None:
    found = walk()
    assert len(found.entered) <= MAX_MODULES, found.entered
    assert found.returns <= MAX_RETURNS, returns_by_module(found)


def test_the_walk_follows_config_and_counts_returns(tmp_path) -> None:
    """The measure can fail: a planted chain a -> b -> a -> c counts three modules and two
    returns; a call that receives nothing of config is not followed."""
    package = tmp_path / "p"
    package.mkdir()
    (package / "a.py").write_text(
        "from p.b import step, Thing\nfrom p.c import unrelated\n"
        "def start(config):\n    spec = config.x\n    thing = Thing(spec)\n"
        "    thing.go(1)\n    unrelated(2)\n    return step(spec)\n"
    )
    (package / "b.py").write_text(
        "from p.c import deep\nclass Thing:\n    def __init__(self, spec):\n"
        "        self.spec = spec\n    def go(self, n):\n        return deep(self.spec)\n"
        "def step(spec):\n    return spec\n"
    )
    (package / "c.py").write_text("def deep(v):\n    return v\ndef unrelated(v):\n    return v\n")
    files = {f"p.{name}": package / f"{name}.py" for name in ("a", "b", "c")}
    found = walk(("p.a", "start", "config"), load(files), driver=("p",))
    assert found.entered == ["p.a", "p.b", "p.c"]
    # a -> b.Thing <- a; a -> b.go -> c.deep <- b <- a; a -> b.step <- a: pairs (a, b), (b, c)
    assert found.returns == 2
    assert sum(step.startswith("<- ") for step in found.path) == 4
    assert "-> p.c.unrelated" not in found.path


if __name__ == "__main__":
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
