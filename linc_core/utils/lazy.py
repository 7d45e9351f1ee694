"""Names a package exports but imports only on first use (PEP 562 ``__getattr__``).

A package whose modules are imported by the modules it re-exports from (``linc_core.problems``:
``instances`` reads the problem registry in ``problems.spec``, the environments read
``instances``) cannot import them eagerly in its ``__init__``; and ``import linc_core`` should
not load the model. Such a package lists ``name -> defining module`` and hands this module's
functions to Python::

    __getattr__, __dir__ = lazy_exports(__name__, {"make_env": "linc_core.problems.spec"})
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, names: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` exporting ``names`` lazily.

    Args:
        package: the package's ``__name__``.
        names: exported name -> the module that defines it.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
