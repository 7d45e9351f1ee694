"""Every exception linc defines survives pickling with its message and fields: Ray pickles a
trial's error to send it to the driver, and an error that cannot be rebuilt there turned a
shard's one-line ``InstanceError`` into ``TypeError: __init__() missing 3 required positional
arguments``."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

PACKAGES = ("linc_core", "orchestration", "sweeps")


def _linc_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        for module_info in pkgutil.walk_packages(root.__path__, f"{package}."):
            module = importlib.import_module(module_info.name)
            for _, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module_info.name
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[name] for name in sorted(found)]


EXCEPTIONS = _linc_exceptions()


def test_the_search_finds_linc_s_exceptions() -> None:
    names = {cls.__name__ for cls in EXCEPTIONS}
    assert {"InstanceError", "DatasetSchemaError", "FileRefusedError", "CheckpointError"} <= names


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=lambda cls: cls.__qualname__)
def test_an_exception_survives_pickling(cls: type[BaseException]) -> None:
    parameters = [
        p
        for p in inspect.signature(cls.__init__, eval_str=True).parameters.values()
        if p.name != "self"
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
    ]
    example = {int: 3, float: 1.25}  # by annotation; any other a string
    arguments = [example.get(p.annotation, f"{p.name}-value") for p in parameters] or ["text"]
    error = cls(*arguments)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls and str(copy) == str(error)
    assert {k: v for k, v in vars(copy).items()} == {k: v for k, v in vars(error).items()}
