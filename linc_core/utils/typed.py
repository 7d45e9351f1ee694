"""Typed configuration: the one builder from a plain mapping to a validated frozen dataclass.

Every configuration in linc (``ModelConfig``, ``TrainConfig``, the platform's sections, the data
set generator's config) is a frozen dataclass whose ``__post_init__`` calls :func:`check_fields`
and then checks its own rules with :func:`require`. :func:`build` turns a mapping (a composed
Hydra config, a checkpoint's saved config, a Tune trial's config) into such a dataclass:

* unknown keys and missing required keys are refused;
* YAML lists become tuples where the field is a tuple, integers become floats where the field
  is a float;
* the type of every value is checked against the field's annotation, and a ``Literal[...]``
  field accepts exactly the values its annotation lists (there is no second list to keep in
  step with it);
* a field annotated ``Annotated[str, OneOfNames(names)]`` accepts the names
  ``names()`` gives when it is checked: a set that grows at run time (the registered problems,
  :data:`linc_core.problems.spec.ProblemName`), which a ``Literal`` cannot be;
* any error is one :class:`ConfigError` line that names the section, the key and the value:
  ``train.learning_rate: expected > 0, got -0.5``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import numbers
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration that cannot run: names the section, key and value at fault."""


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the known word closest to ``word`` (ties: all), or ``""``.

    A typo'd key or option should point at the word meant, not at a list to search.
    """
    scored = [(difflib.SequenceMatcher(None, word, k).ratio(), k) for k in sorted(set(known))]
    best = max((score for score, _ in scored), default=0.0)
    close = [k for score, k in scored if score >= max(best, 0.6) - 0.02]
    return f" (did you mean {' or '.join(repr(c) for c in close[:3])}?)" if close else ""


@dataclass(frozen=True)
class OneOfNames:
    """The mark of a ``str`` field that must be one of ``names()`` (read when checked; a
    value outside them is refused as one outside a ``Literal`` is).

    Attributes:
        names: the names accepted now.
    """

    names: Callable[[], Iterable[str]]


def require(condition: bool, key: str, value: object, expected: str) -> None:
    """Raise ``ValueError("key: expected EXPECTED, got VALUE")`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(f"{key}: expected {expected}, got {value!r}")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of every field of dataclass ``cls``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def literal_values(cls: type, name: str) -> tuple[Any, ...]:
    """The values the ``Literal[...]`` annotation of field ``name`` allows (also under ``|``)."""
    hint = field_types(cls)[name]
    for option in (hint, *get_args(hint)):
        if get_origin(option) is Literal:
            return get_args(option)
    raise TypeError(f"{cls.__name__}.{name} is not a Literal field")


def check_fields(config: object) -> None:
    """Check every field of dataclass instance ``config`` against its annotation.

    Raises:
        ValueError: ``"key: expected DESCRIPTION, got VALUE"`` for the first field that does not
            match (a value outside a ``Literal`` lists the allowed values).
    """
    for name, hint in field_types(type(config)).items():
        value = getattr(config, name)
        if not _matches(value, hint):
            words = [str(a) for a in get_args(hint) if isinstance(a, str)]
            words += [n for mark in _marks(hint) for n in mark.names()]
            hint_text = did_you_mean(value, words) if isinstance(value, str) else ""
            raise ValueError(f"{name}: expected {_describe(hint)}, got {value!r}{hint_text}")


def check_keys(
    cls: type,
    values: Mapping[str, Any],
    section: str,
    *,
    required: bool = True,
    exclude: Iterable[str] = (),
) -> None:
    """Refuse keys ``cls`` has no field for (and, with ``required``, missing required keys).

    ``exclude`` names fields that may not be given in this section.
    """
    known = {f.name for f in dataclasses.fields(cls)} - set(exclude)
    unknown = sorted(set(values) - known)
    if unknown:
        hint = did_you_mean(unknown[0], known)
        raise ConfigError(
            f"{_label(section)}unknown key(s) {unknown}{hint}; known: {sorted(known)}"
        )
    if required:
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and f.name not in values
        )
        if missing:
            raise ConfigError(f"{_label(section)}missing key(s) {missing}")


def build(cls: type[T], values: Mapping[str, Any] | None, section: str) -> T:
    """``cls(**values)``, checked: see the module docstring.

    Args:
        cls: a frozen dataclass whose ``__post_init__`` calls :func:`check_fields`.
        values: the mapping (``None`` is an empty one).
        section: where the mapping sits in the whole config (``"train"``, ``"cluster"``); it
            prefixes every message. ``""`` for a top-level config.

    Raises:
        ConfigError: unknown or missing keys, a wrong type or a value the rules refuse.
    """
    values = dict(values or {})
    check_keys(cls, values, section)
    types_ = field_types(cls)
    coerced = {key: _coerce(value, types_[key]) for key, value in values.items()}
    return within(section, lambda: cls(**coerced))


def within(section: str, make: typing.Callable[[], T]) -> T:
    """``make()``, with a ``ValueError`` it raises turned into a :class:`ConfigError` whose
    message starts with ``section.`` (an error that is already a ``ConfigError`` passes)."""
    try:
        return make()
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{section}.{err}" if section else str(err)) from None


def _label(section: str) -> str:
    return f"{section}: " if section else ""


def _coerce(value: Any, hint: Any) -> Any:
    """YAML gives lists for tuples and may give ``1`` for ``1.0``."""
    options = _options(hint)
    if isinstance(value, list) and any(get_origin(o) is tuple for o in options):
        return tuple(value)
    if float in options and int not in options and _is_int(value):
        return float(value)
    return value


def _options(hint: Any) -> tuple[Any, ...]:
    if get_origin(hint) in (Union, types.UnionType):
        return get_args(hint)
    return (hint,)


def _is_int(value: object) -> bool:
    # bool is an int subclass; a bool where a number is expected is a config mistake.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _marks(hint: Any) -> list[OneOfNames]:
    """The ``OneOfNames`` marks of an ``Annotated`` hint (none for any other)."""
    if get_origin(hint) is not Annotated:
        return []
    return [mark for mark in hint.__metadata__ if isinstance(mark, OneOfNames)]


def _matches(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is Annotated:
        return _matches(value, get_args(hint)[0]) and all(
            value in tuple(mark.names()) for mark in _marks(hint)
        )
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(hint))
    if origin in (Union, types.UnionType):
        return any(_matches(value, option) for option in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return _is_int(value)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if origin is tuple:
        args = get_args(hint)
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(args) == len(value) and all(map(_matches, value, args))
    if origin in (dict, Mapping):
        key_type, value_type = get_args(hint) or (Any, Any)
        return isinstance(value, Mapping) and all(
            _matches(k, key_type) and _matches(v, value_type) for k, v in value.items()
        )
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True  # an annotation this checker does not know is not checked


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin is Annotated:
        marks = _marks(hint)
        if not marks:
            return _describe(get_args(hint)[0])
        return " and ".join(f"one of {tuple(m.names())}" for m in marks)
    if origin is Literal:
        return f"one of {get_args(hint)}"
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(option) for option in get_args(hint))
    if hint is type(None):
        return "null"
    if origin is tuple:
        args = get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list of {len(args)}"
    if origin in (dict, Mapping):
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


__all__ = [
    "ConfigError",
    "OneOfNames",
    "build",
    "check_fields",
    "check_keys",
    "did_you_mean",
    "field_types",
    "literal_values",
    "require",
    "within",
]
