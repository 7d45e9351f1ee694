"""The platform config: the sections of a composed mapping, validated, and the run they
resolve to (:class:`PlatformConfig`), once.

Hydra (``sweeps/conf``) composes a plain nested mapping; :meth:`PlatformConfig.from_mapping`
builds each section (:mod:`orchestration.config.sections`) with
:func:`linc_core.utils.typed.build` and resolves the run the sections describe into a
:class:`linc_core.runs.plan.RunPlan`. A Tune trial receives the same mapping (with its
variant and seed filled in) and resolves it again on the worker
(:class:`orchestration.trial.plan.TrialPlan`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from linc_core.runs.plan import RunPlan, resolve_run
from linc_core.runs.protocols import variant_list
from linc_core.utils.typed import ConfigError, build, within
from orchestration.config.sections import (
    ClusterSpec,
    ConsoleSpec,
    DataSpec,
    FaultSpec,
    ModelSpec,
    TaskSpec,
    TrackingSpec,
)
from orchestration.config.sweep_sections import AblationSpec, SearchSpec

SECTIONS = (
    "task",
    "model",
    "train",
    "data",
    "tracking",
    "cluster",
    "ablation",
    "search",
    "fault",
    "console",
)


@dataclass(frozen=True)
class PlatformConfig:
    """A validated sweep, search or run: the resolved run of its base trial and the platform
    sections around it. ``raw`` is the composed mapping (what Tune's trials receive)."""

    run: RunPlan
    tracking: TrackingSpec
    cluster: ClusterSpec
    ablation: AblationSpec
    search: SearchSpec | None
    fault: FaultSpec
    raw: dict[str, Any]
    console: ConsoleSpec = ConsoleSpec()

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], chosen: Collection[str] | None = None
    ) -> PlatformConfig:
        """Validate a composed config and resolve its run; :class:`ConfigError` on any unknown
        key or bad value.

        ``chosen``: the dotted keys the user set (:func:`override_keys` of the command line);
        a value they did not set may follow the task (a preset's evaluation set of another
        problem becomes the task's validation set: :meth:`DataSpec.for_task`), one they set is
        refused. None: every value counts as chosen.
        """
        values = dict(values)
        unknown = sorted(set(values) - set(SECTIONS))
        if unknown:
            raise ConfigError(f"unknown section(s) {unknown}; known: {list(SECTIONS)}")
        task = build(TaskSpec, values.get("task"), "task")
        model = build(ModelSpec, values.get("model"), "model")
        data = build(DataSpec, values.get("data"), "data")
        source = within("task", lambda: data.source_of(task))  # its refusals come first
        set_by_user = chosen is None or "data.eval_source" in chosen
        followed = within("data", lambda: data.for_task(task, set_by_user))
        if followed != data:  # the trials, which resolve the mapping again, see the same
            values = with_dotted(values, {"data.eval_source": followed.eval_source})
            data = followed
        # null in the train and model.overrides sections means "the variant's value".
        train = _without_nulls(values.get("train"))
        cluster = build(ClusterSpec, values.get("cluster"), "cluster")
        if "device" not in train and cluster.use_gpu:  # a trial trains where Ray places it
            train["device"] = "cuda"
        ablation = dict(values.get("ablation") or {})
        if "variants" in ablation:
            ablation["variants"] = variant_list(ablation["variants"])
        search = values.get("search")
        run = resolve_run(
            model.variant,
            source,
            protocol=train.pop("protocol", None),
            train=train,
            model=_without_nulls(model.overrides),
            validation_seed=data.validation_seed(),
            evaluation=data.evaluation(),
        )
        search_spec = build(SearchSpec, search, "search") if search else None
        if search_spec is not None:
            within("search", lambda: search_spec.require_reported(run))
        config = cls(
            run=run,
            tracking=build(TrackingSpec, values.get("tracking"), "tracking"),
            cluster=cluster,
            ablation=build(AblationSpec, ablation, "ablation"),
            search=search_spec,
            fault=build(FaultSpec, values.get("fault"), "fault"),
            raw=values,
            console=build(ConsoleSpec, values.get("console"), "console"),
        )
        if search_spec is not None:  # once the rest is valid: a refusal is then the search's
            _require_searchable(values, search_spec)
        return config

    def with_values(self, **dotted: Any) -> dict[str, Any]:
        """A copy of the raw mapping with ``section.key`` values replaced (``model.variant``)."""
        return with_dotted(self.raw, dotted)


def _require_searchable(values: Mapping[str, Any], search: SearchSpec) -> None:
    """Refuse a searched key that names no setting, or a choice or a range's end that its
    setting refuses (``model.variant`` choice ``evil``, ``train.learning_rate`` low -5): each
    put alone into the config, the others searched left out (so that a trial, whose config
    holds the values drawn for them, checks what the driver checked) and validated as any
    config is, before the search starts rather than in every trial."""
    base = {section: part for section, part in values.items() if section != "search"}
    base = _without_dotted(base, search.space)
    for key, which, value in search.edges():
        try:
            PlatformConfig.from_mapping(with_dotted(base, {key: value}))
        except ConfigError as err:
            raise ConfigError(f"search.space.{key}: {which} {value!r} is refused: {err}") from None


def dotted_get(values: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``values["a"]["b"]`` for ``key="a.b"`` (``default`` where a part is missing)."""
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def dotted_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's parameter names (Tune flattens its search space with ``/``) as config keys."""
    return {key.replace("/", "."): value for key, value in params.items()}


def trial_label(values: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    """What names a trial by the values its sweep varies: ``full_linc seed=1234`` or
    ``learning_rate=0.000846 tau_start=5.85`` (a variant by its name, floats to 3 digits)."""
    parts = []
    for key in keys:
        value = dotted_get(values, key)
        leaf = key.rsplit(".", 1)[-1]
        if leaf == "variant":
            parts.append(str(value))
        else:
            parts.append(f"{leaf}={value:.3g}" if isinstance(value, float) else f"{leaf}={value}")
    return " ".join(parts)


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted keys (and groups) a command line's Hydra overrides set: ``data.eval_source``
    of ``data.eval_source=solomon50`` or ``++data.eval_source=...``, ``task`` of
    ``task=cvrp``."""
    return {text.split("=", 1)[0].lstrip("+~") for text in overrides if "=" in text}


def _without_nulls(values: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (values or {}).items() if v is not None}


def with_dotted(values: Mapping[str, Any], dotted: Mapping[str, Any]) -> dict[str, Any]:
    """Deep copy of ``values`` with ``{"a.b": v}`` assignments applied (sections created)."""
    result = _deep_copy(values)
    for key, value in dotted.items():
        *parents, leaf = key.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return result


def _without_dotted(values: Mapping[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """Deep copy of ``values`` without the ``"a.b"`` keys (those that are there)."""
    result = _deep_copy(values)
    for key in keys:
        *parents, leaf = key.split(".")
        node = dotted_get(result, ".".join(parents)) if parents else result
        if isinstance(node, dict):
            node.pop(leaf, None)
    return result


def _deep_copy(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in values.items()}


__all__ = [
    "dotted_params",
    "dotted_get",
    "override_keys",
    "trial_label",
    "PlatformConfig",
    "SECTIONS",
    "with_dotted",
]
