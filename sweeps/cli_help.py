"""``--help`` of the Hydra entry points, laid out as Hydra's own application help.

Hydra's ``--help`` shows the application's description, ``== Configuration groups ==`` (each
group and its options) and ``== Config ==`` (the config the overrides compose to). linc keeps
those sections: the description and examples come from the entry point's module docstring,
the groups from the config tree (the selected option of each marked), and ``== Config ==``
lists every key per section (``--cfg job`` prints the values), followed by the flags.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linc_core.utils.typed import ConfigError
from sweeps.compose import CONFIG_TREES, compose_tree, config_groups, sweep_pointer

WIDTH = 100
FLAGS = (
    ("-h, --help", "this help"),
    ("-c, --cfg job", "print the composed config (with the overrides) instead of running"),
    ("-c, --cfg plan", "print the resolved plan: the effective settings the run would use"),
    ("-p, --package KEY", "with --cfg: print only KEY (e.g. -p {key})"),
    ("--resolve", "accepted for Hydra's sake: printed configs are always resolved"),
    ("-m, --multirun", "not a Hydra multirun here: see below"),
)


def render_help(
    entry: str, doc: str, overrides: Sequence[str] = (), config_name: str = "config"
) -> str:
    """The help text of ``entry``: description, examples, groups, keys, flags.

    ``overrides`` select the options shown as chosen; overrides that do not compose are
    ignored (help must always answer).
    """
    composed, choices = _composed(overrides, config_name)
    groups = config_groups(config_name)
    lines = [f"== {entry} ==", "", *_description(doc), ""]
    usage = "[GROUP=OPTION ...] [KEY=VALUE ...]" if groups else "[KEY=VALUE ...]"
    lines += [f"Usage: {entry} [FLAG ...] {usage}", ""]
    if groups:
        lines += _groups(groups, choices, config_name)
        lines += ["== Config ==", "Override any key (section.key=value); the keys:", ""]
        lines += _keys(composed)
        shown = (
            f"`{entry} --cfg job` prints the values, `{entry} --cfg plan` the effective settings."
        )
    else:  # a flat config: its file says what each key means
        primary = CONFIG_TREES[config_name] / f"{config_name}.yaml"
        lines += ["== Config ==", f"Override any key (key=value); {primary.name}:", ""]
        body = primary.read_text().splitlines()
        start = next(i for i, line in enumerate(body) if not line.startswith("#"))
        lines += [f"  {line}" for line in body[start:]]
        shown = f"`{entry} --cfg job` prints the values the overrides compose to."
    lines += ["", shown, "", "== Flags ==", ""]
    flags = [f for f in FLAGS if groups or "plan" not in f[0]]
    # the -p example is a key of this command's own config ("train" where there is one)
    key = "train" if "train" in composed else next(iter(composed))
    lines += [f"  {flag:<20}{meaning.format(key=key)}" for flag, meaning in flags]
    lines += ["", *textwrap.wrap(f"Sweeps: {sweep_pointer(config_name)}.", WIDTH)]
    return "\n".join(lines) + "\n"


def _groups(groups: dict[str, list[str]], choices: dict, config_name: str) -> list[str]:
    """``== Configuration groups ==``: each group's options, then what each option is."""
    lines = [
        "== Configuration groups ==",
        "Compose your configuration from those groups (group=option); [brackets] mark the "
        "chosen option:",
        "",
    ]
    width = max(len(g) for g in groups) + 2
    for group, options in groups.items():
        shown = ", ".join(f"[{o}]" if o == choices.get(group) else o for o in options)
        lines.append(f"  {group + ':':<{width}}{shown}")
    lines += ["", "The options to choose between, in their files' words:", ""]
    for group, options in groups.items():
        for option in options if len(options) > 1 else ():
            summary = _summary(CONFIG_TREES[config_name] / group / f"{option}.yaml")
            lines += textwrap.wrap(
                f"{group}={option}: {summary}",
                WIDTH,
                initial_indent="  ",
                subsequent_indent="      ",
                max_lines=2,
                placeholder=" [...]",
            )
    return [*lines, ""]


def _composed(overrides: Sequence[str], config_name: str) -> tuple[dict[str, Any], dict]:
    """(the composed config, unresolved; group -> chosen option)."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    try:
        composed = compose_tree(overrides, config_name, with_choices=True)
    except (HydraException, ConfigError):
        composed = compose_tree((), config_name, with_choices=True)
    choices = dict(composed.hydra.runtime.choices)
    values = OmegaConf.to_container(composed, resolve=False)
    assert isinstance(values, dict)
    values.pop("hydra", None)
    return values, choices


def _summary(path: Path) -> str:
    """The first sentence of a config file's leading comment."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# @package"):
            words.append(line.lstrip("# ").strip())
    text = " ".join(words)
    end = re.search(r"\.\s+[A-Z]", text)  # "Kool et al. instances" is one sentence
    return text[: end.start() + 1] if end else text


def _description(doc: str) -> list[str]:
    """The module docstring as plain text (reStructuredText's double backquotes made single)."""
    return textwrap.dedent(doc.replace("``", "`")).strip().splitlines()


def _keys(values: dict[str, Any]) -> list[str]:
    """``  section: key key key`` per section (a mapping of settings as ``name.{a b}``, a
    free-form one by its name); a top-level scalar as ``  key: value``."""
    lines = []
    width = max(len(k) for k in values) + 2
    for key, value in values.items():
        if isinstance(value, dict):
            text = " ".join(_leaf_names(value))
        else:
            text = "???" if value == "???" else str(value)
        wrapped = textwrap.wrap(text, WIDTH - width - 2) or [""]
        lines.append(f"  {key + ':':<{width}}{wrapped[0]}")
        lines += [" " * (width + 2) + more for more in wrapped[1:]]
    return lines


def _leaf_names(values: dict[str, Any]) -> list[str]:
    names = []
    for key, value in values.items():
        settings = isinstance(value, dict) and value
        if settings and not any(isinstance(v, dict) for v in value.values()):
            names.append(f"{key}.{{{' '.join(_leaf_names(value))}}}")
        else:
            names.append(str(key))
    return names


__all__ = ["render_help"]
