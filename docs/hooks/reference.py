"""MkDocs hook: the reference pages generated from the code at every build.

A page holding a marker gets it replaced by text generated from the code itself, so the
reference cannot drift from it:

- ``<!-- linc:config -->``: every key ``linc-tune --cfg job`` prints, per section, with its
  type, its default in the composed config, and the first sentence of its docstring (the
  ``Attributes:`` entry of the dataclass that validates the section). A key without a docstring
  entry, or a documented field the composed config lacks, fails the build.
- ``<!-- linc:cli -->``: each command line's ``--help``.
- ``<!-- linc:metrics -->``: the metrics table of ``linc_core.metrics``.
- ``<!-- linc:faults -->``: the fault matrix's rows with their scenario's description.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

# The fault matrix (faults/) is not an installed package: the generators import it from the
# repository, wherever mkdocs was started (its console script puts only its bin folder on
# sys.path). Added when a page is built: mkdocs restores sys.path after loading a hook.
_ROOT = str(Path(__file__).resolve().parents[2])

MARKERS = ("config", "cli", "metrics", "faults")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if _ROOT not in sys.path:
        sys.path.append(_ROOT)
    for name in MARKERS:
        marker = f"<!-- linc:{name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, GENERATORS[name]())
    return markdown


# ---------------------------------------------------------------------------------- config
def _attribute_docs(cls: type) -> dict[str, str]:
    """``name -> text`` of the ``Attributes:`` section of ``cls``'s docstring (Google style;
    ``a, b: text`` documents both)."""
    doc = cls.__doc__ or ""
    match = re.search(r"\n\s*Attributes:\n(.*?)(?:\n\s*\n(?=\s*\S)(?!\s{8})|\Z)", doc, re.S)
    if not match:
        return {}
    entries: dict[str, str] = {}
    current: list[str] = []
    for line in match.group(1).splitlines():
        head = re.match(r"^\s{4,8}([\w, ]+):\s*(.*)$", line)
        if head and not line.startswith(" " * 12):
            current = [head.group(2)]
            for name in head.group(1).split(","):
                entries[name.strip()] = current  # shared list: continuation lines reach all
        elif current:
            current.append(line.strip())
    return {name: " ".join(words).strip() for name, words in entries.items()}


def _first_sentence(text: str) -> str:
    """Up to the first full stop outside parentheses and code that ends a sentence (a capital
    or the end follows), as Markdown table text."""
    text = text.replace("``", "`")
    depth, code = 0, False
    for index, char in enumerate(text):
        if char == "`":
            code = not code
        elif not code and char in "([":
            depth += 1
        elif not code and char in ")]":
            depth = max(depth - 1, 0)
        elif char == "." and depth == 0 and not code:
            rest = text[index + 1 :]
            if not rest.strip() or re.match(r"\s+[A-Z`]", rest):
                text = text[: index + 1]
                break
    return text.strip().replace("|", "\\|")


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return " \\| ".join(f"`{v!r}`" for v in typing.get_args(hint))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(hint)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return getattr(hint, "__name__", str(hint))


def _section_classes() -> dict[str, type]:
    from linc_core.config import ModelConfig, TrainConfig
    from orchestration.config import sections, sweep_sections

    return {
        "task": sections.TaskSpec,
        "model": sections.ModelSpec,
        "model.overrides": ModelConfig,
        "train": TrainConfig,
        "data": sections.DataSpec,
        "tracking": sections.TrackingSpec,
        "cluster": sections.ClusterSpec,
        "ablation": sweep_sections.AblationSpec,
        "search": sweep_sections.SearchSpec,
        "fault": sections.FaultSpec,
        "console": sections.ConsoleSpec,
    }


# keys of a composed section that its dataclass does not hold, with their meaning
EXTRA_KEYS = {
    "train.protocol": (
        "str or null",
        "a protocol of `linc_core/runs/protocols.py` whose training settings apply under the "
        "section's own (`ablation`: the paper's schedule); null: none.",
    ),
}


def config_reference() -> str:
    from sweeps.compose import compose_mapping

    composed = compose_mapping([])
    classes = _section_classes()
    problems: list[str] = []
    lines = [
        "Generated from the code at every build: the keys `linc-tune --cfg job` prints, with "
        "the composed default (the `config.yaml` defaults and their group options) and the "
        "first sentence of each setting's docstring. In `train` and `model.overrides` null "
        "keeps the variant's or the protocol's value.",
        "",
    ]
    for section, values in composed.items():
        lines += _section_table(section, values, classes, problems)
        if isinstance(values, dict) and isinstance(values.get("overrides"), dict):
            lines += _section_table(f"{section}.overrides", values["overrides"], classes, problems)
    if problems:
        raise PluginError("config reference: " + "; ".join(problems))
    return "\n".join(lines)


def _section_table(
    section: str, values: Any, classes: dict[str, type], problems: list[str]
) -> list[str]:
    cls = classes.get(section)
    if cls is None:
        problems.append(f"section {section!r} has no dataclass in the reference's table")
        return []
    docs = _attribute_docs(cls)
    if cls.__doc__ and not docs:  # a one-paragraph docstring: "``key``: text" entries
        docs = {m[0]: m[1] for m in re.findall(r"``(\w+)``: ([^;]+)", cls.__doc__)}
    hints = typing.get_type_hints(cls, include_extras=True)
    known = {f.name for f in dataclasses.fields(cls)}
    lines = [f"## `{section}`", "", f"Validated by `{cls.__module__}.{cls.__qualname__}`.", ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, value in values.items():
        dotted = f"{section}.{key}"
        if key == "overrides" and isinstance(value, dict):
            meaning, type_name = "the model's settings over the variant's (below)", "mapping"
        elif key in known:
            text = docs.get(key)
            if not text:
                problems.append(f"{dotted} has no entry in {cls.__qualname__}'s docstring")
                text = ""
            meaning, type_name = _first_sentence(text), _type_name(hints[key])
        elif dotted in EXTRA_KEYS:
            type_name, meaning = EXTRA_KEYS[dotted]
        else:
            problems.append(f"{dotted} is not a field of {cls.__qualname__}")
            continue
        shown = "mapping (see below)" if isinstance(value, dict) and value else repr(value)
        if value is None:
            shown = "null"
        lines.append(f"| `{key}` | {type_name} | `{shown}` | {meaning} |".replace("\n", " "))
    return [*lines, ""]


# ------------------------------------------------------------------------------------- cli
COMMANDS: dict[str, tuple[str, str]] = {
    # command -> (module, its main)
    "linc-demo": ("sweeps.demo", "main"),
    "linc-generate": ("sweeps.generate", "main"),
    "linc-tune": ("sweeps.train", "main"),
    "linc-ablation": ("sweeps.ablation", "main"),
    "linc-hpo": ("sweeps.hpo", "main"),
    "linc-report": ("sweeps.report", "main"),
    "linc-train": ("linc_core.commands.train", "main"),
    "linc-eval": ("linc_core.commands.evaluate", "main"),
    "linc-solve": ("linc_core.commands.solve", "main"),
    "linc-data": ("linc_core.commands.data", "main"),
    "linc-diagnose": ("linc_core.commands.diagnose", "main"),
}


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        yield out


def _help_of(module: str, main: str) -> str:
    import importlib

    entry: Callable[[list[str]], Any] = getattr(importlib.import_module(module), main)
    with _captured() as out, contextlib.suppress(SystemExit):
        entry(["--help"])
    return out.getvalue().rstrip()


def cli_reference() -> str:
    lines = ["Generated at every build from each command's own `--help`.", ""]
    for command, (module, main) in COMMANDS.items():
        text = _help_of(module, main)
        if not text:
            raise PluginError(f"cli reference: {command} --help printed nothing")
        lines += [f"## `{command}`", "", "```text", text, "```", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------- metrics
def metrics_reference() -> str:
    from linc_core.metrics import METRICS

    lines = [
        "Generated from `linc_core/metrics.py`, the one place metric names are defined.",
        "",
        "| metric | recorded | better | meaning |",
        "|---|---|---|---|",
    ]
    for metric in METRICS.values():
        better = metric.better or ""
        lines.append(f"| `{metric.name}` | {metric.record} | {better} | {metric.meaning} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- faults
def _scenario(entry: Callable[..., Any]) -> Callable[..., Any]:
    """The scenario function behind a matrix entry (a lambda calls one with options)."""
    if entry.__name__ != "<lambda>":
        return entry
    return entry.__globals__[entry.__code__.co_names[0]]


def faults_reference() -> str:
    import inspect

    from faults.scenarios import MATRIX

    lines = [
        "Generated from `faults/scenarios/`: each row, the scenario it runs (`python -m faults "
        "--only ROW`) and what the scenario does and checks, in its own words.",
        "",
        "| row | scenario | what it does and checks |",
        "|---|---|---|",
    ]
    for name, entry in MATRIX.items():
        scenario = _scenario(entry)
        doc = inspect.getdoc(scenario) or ""
        if not doc:
            raise PluginError(f"faults reference: scenario {scenario.__name__} has no docstring")
        first = " ".join(doc.split("\n\n")[0].split()).replace("``", "`").replace("|", "/")
        lines.append(f"| `{name}` | `{scenario.__module__}.{scenario.__name__}` | {first} |")
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "config": config_reference,
    "cli": cli_reference,
    "metrics": metrics_reference,
    "faults": faults_reference,
}
