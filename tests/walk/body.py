"""The walk of tests/walk/config_walk.py through one function body: which names hold config (are
tainted), the linc classes of names, and the calls it follows (``Walk.call``) in evaluation order.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.walk.config_walk import Walk


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
