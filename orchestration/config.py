"""The platform's typed configuration: one validated object per run, sweep or search.

Hydra (``sweeps/conf``) composes a plain nested mapping; :meth:`PlatformConfig.from_mapping` is the
one converter from that mapping to typed objects and on to ``linc_core``'s ``ModelConfig`` and
``TrainConfig``. Unknown keys and bad values raise :class:`ConfigError` naming the section, the
key and the value. A Tune trial receives the same mapping (with its variant and seed filled in)
and converts it again on the worker, so a trial never runs an unchecked configuration.

Sections (see ``sweeps/conf/config.yaml`` for the defaults and their meaning):

* ``task``: problem and instance size of generated training data.
* ``model``: the variant (a preset of ``linc_core.config.PRESETS``) and field overrides.
* ``train``: ``TrainConfig`` field overrides (on top of the variant's own).
* ``data``: where training, validation and final-evaluation instances come from.
* ``tracking``: MLflow store and experiment.
* ``cluster``: Ray address, trial resources, data-parallel workers, retries, Tune storage.
* ``ablation``: variants x seeds of the ablation sweep and its reference row.
* ``search``: the Optuna/ASHA hyper-parameter search.
* ``fault``: deliberate failures, for testing retries (off by default).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from linc_core.config import ModelConfig, TrainConfig
from linc_core.model.reference_format import reference_initialisation_unsupported
from linc_core.presets import ABLATION_VARIANTS, PRESETS, variant_configs

DATA_SOURCES = ("generated", "dataset", "solomon50")
EVAL_SOURCES = ("validation", "dataset", "solomon50", "none")
SEARCH_DISTRIBUTIONS = ("uniform", "loguniform", "choice", "randint")


class ConfigError(ValueError):
    """A configuration that cannot run: names the section, key and value at fault."""


def _require(condition: bool, section: str, key: str, value: Any, expected: str) -> None:
    if not condition:
        raise ConfigError(f"{section}.{key}: {expected}, got {value!r}")


def _build(cls: type, values: Mapping[str, Any] | None, section: str) -> Any:
    """``cls(**values)`` after rejecting keys ``cls`` does not have."""
    values = dict(values or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{section}: unknown key(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**values)
    except TypeError as err:
        raise ConfigError(f"{section}: {err}") from None


@dataclass(frozen=True)
class TaskSpec:
    problem: str = "cvrptw"
    num_customers: int = 20

    def __post_init__(self) -> None:
        _require(
            self.problem in ("cvrptw", "cvrp", "tsp"),
            "task",
            "problem",
            self.problem,
            "expected cvrptw, cvrp or tsp",
        )
        _require(
            isinstance(self.num_customers, int) and self.num_customers >= 2,
            "task",
            "num_customers",
            self.num_customers,
            "expected an integer >= 2",
        )


@dataclass(frozen=True)
class ModelSpec:
    variant: str = "full_linc"
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(
            self.variant in PRESETS, "model", "variant", self.variant, f"one of {sorted(PRESETS)}"
        )


@dataclass(frozen=True)
class DataSpec:
    """Training, validation and final-evaluation data.

    Attributes:
        source: ``generated`` (fresh seeded instances every batch, the paper's training),
            ``dataset`` (a Parquet data set written by ``linc-generate`` at ``uri``) or
            ``solomon50`` (the ablation protocol: the 56 Solomon instances cut to 50 customers).
        uri: the data set for ``source=dataset`` (local folder or ``s3://...``).
        seed: base seed of generated batches and of the shuffle of a data set.
        eval_source: what the final checkpoint is evaluated on: ``validation`` (the validation
            set), ``dataset`` (``eval_uri``), ``solomon50`` or ``none``.
        eval_uri: the evaluation data set for ``eval_source=dataset``.
        eval_rollouts: z vectors (or starts) per instance at the final evaluation.
        eval_augment: 1, or 8 for the dihedral augmentation.
        eval_decoding: ``greedy`` (per z) or ``sampling``.
    """

    source: str = "generated"
    uri: str | None = None
    seed: int = 0
    eval_source: str = "validation"
    eval_uri: str | None = None
    eval_rollouts: int = 128
    eval_augment: int = 8
    eval_decoding: str = "greedy"

    def __post_init__(self) -> None:
        _require(
            self.source in DATA_SOURCES, "data", "source", self.source, f"one of {DATA_SOURCES}"
        )
        _require(
            self.source != "dataset" or bool(self.uri),
            "data",
            "uri",
            self.uri,
            "a data set folder or s3:// URI when source=dataset",
        )
        _require(
            self.eval_source in EVAL_SOURCES,
            "data",
            "eval_source",
            self.eval_source,
            f"one of {EVAL_SOURCES}",
        )
        _require(
            self.eval_source != "dataset" or bool(self.eval_uri),
            "data",
            "eval_uri",
            self.eval_uri,
            "a data set folder or s3:// URI when eval_source=dataset",
        )
        _require(self.eval_rollouts >= 1, "data", "eval_rollouts", self.eval_rollouts, ">= 1")
        _require(self.eval_augment in (1, 8), "data", "eval_augment", self.eval_augment, "1 or 8")
        _require(
            self.eval_decoding in ("greedy", "sampling"),
            "data",
            "eval_decoding",
            self.eval_decoding,
            "greedy or sampling",
        )


@dataclass(frozen=True)
class TrackingSpec:
    """MLflow. ``uri`` null: ``$MLFLOW_TRACKING_URI``, else a SQLite store in the storage folder.

    ``parent_run_id`` and ``sweep`` are filled in by the sweep driver: each trial's run is nested
    under the sweep's parent run and tagged with the sweep's name.
    """

    uri: str | None = None
    experiment: str = "linc"
    artifact_location: str | None = None
    parent_run_id: str | None = None
    sweep: str | None = None

    def __post_init__(self) -> None:
        _require(bool(self.experiment), "tracking", "experiment", self.experiment, "a name")


@dataclass(frozen=True)
class ClusterSpec:
    """Where and with what a trial runs.

    Attributes:
        address: Ray address (null: ``$RAY_ADDRESS`` under ``ray job submit``, else a local
            Ray started on 127.0.0.1).
        num_cpus: CPUs of a local Ray (null: all).
        cpus_per_trial, gpus_per_trial: resources of a single-worker trial (fractions allowed).
        num_workers: data-parallel workers per trial (> 1 runs Ray Train's TorchTrainer).
        cpus_per_worker, gpus_per_worker: resources of each data-parallel worker.
        custom_resources: extra Ray resources every trial (or worker) requests, e.g. a
            node-type marker ``{"linc_worker": 1}``.
        max_concurrent_trials: 0 lets Tune run as many as resources allow.
        max_failures: retries of a failed trial, each restored from its last checkpoint.
        storage: Tune storage: a local folder (made absolute) or ``s3://bucket/prefix``.
        torch_threads: intra-op threads per trial (match ``cpus_per_trial`` on shared hosts).
        reuse_actors: a finished trial's process runs the next trial (Tune's ``reuse_actors``),
            which skips a new process and its imports (torch, MLflow, Ray Tune: seconds) per
            trial of a sweep.
    """

    address: str | None = None
    num_cpus: int | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    num_workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    custom_resources: dict[str, float] = field(default_factory=dict)
    max_concurrent_trials: int = 0
    max_failures: int = 2
    storage: str = "runs"
    torch_threads: int = 1
    reuse_actors: bool = True

    def __post_init__(self) -> None:
        for key in ("cpus_per_trial", "gpus_per_trial", "cpus_per_worker", "gpus_per_worker"):
            value = getattr(self, key)
            _require(isinstance(value, int | float) and value >= 0, "cluster", key, value, ">= 0")
        _require(self.num_workers >= 1, "cluster", "num_workers", self.num_workers, ">= 1")
        _require(
            self.num_cpus is None or self.num_cpus >= 1,
            "cluster",
            "num_cpus",
            self.num_cpus,
            "null or >= 1",
        )
        _require(
            self.max_concurrent_trials >= 0,
            "cluster",
            "max_concurrent_trials",
            self.max_concurrent_trials,
            ">= 0",
        )
        _require(self.max_failures >= 0, "cluster", "max_failures", self.max_failures, ">= 0")
        _require(self.torch_threads >= 1, "cluster", "torch_threads", self.torch_threads, ">= 1")
        _require(bool(self.storage), "cluster", "storage", self.storage, "a folder or URI")
        for name, amount in self.custom_resources.items():
            _require(
                isinstance(amount, int | float) and amount > 0,
                "cluster",
                f"custom_resources.{name}",
                amount,
                "> 0",
            )

    @property
    def use_gpu(self) -> bool:
        return (self.gpus_per_worker if self.num_workers > 1 else self.gpus_per_trial) > 0

    def storage_path(self, base: Path | None = None) -> str:
        """The Tune storage as an absolute local path, or the URI unchanged."""
        if "://" in self.storage:
            return self.storage
        path = Path(self.storage).expanduser()
        return str(path if path.is_absolute() else (base or Path.cwd()) / path)


@dataclass(frozen=True)
class AblationSpec:
    variants: tuple[str, ...] = ABLATION_VARIANTS
    seeds: tuple[int, ...] = (1234,)
    reference: str = "full_linc"
    name: str = "ablation"
    resume: bool = True

    def __post_init__(self) -> None:
        _require(bool(self.variants), "ablation", "variants", self.variants, "at least one")
        for variant in self.variants:
            _require(
                variant in PRESETS, "ablation", "variants", variant, f"one of {sorted(PRESETS)}"
            )
        _require(bool(self.seeds), "ablation", "seeds", self.seeds, "at least one seed")
        _require(
            len(set(self.variants)) == len(self.variants),
            "ablation",
            "variants",
            self.variants,
            "no repeats",
        )
        _require(
            self.reference in self.variants,
            "ablation",
            "reference",
            self.reference,
            f"one of the swept variants {self.variants}",
        )


@dataclass(frozen=True)
class SearchSpec:
    """Optuna (TPE) through Tune's ``OptunaSearch`` with ASHA early stopping.

    ``space`` maps a dotted config key (``train.learning_rate``) to ``{"distribution":
    uniform|loguniform|randint|choice, "low", "high"}`` or ``{"distribution": "choice",
    "values": [...]}``.
    """

    name: str = "hpo"
    num_samples: int = 8
    max_concurrent: int = 2
    metric: str = "validation_cost"
    mode: str = "min"
    grace_period: int = 1
    reduction_factor: int = 2
    seed: int = 0
    space: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.num_samples >= 1, "search", "num_samples", self.num_samples, ">= 1")
        _require(self.max_concurrent >= 1, "search", "max_concurrent", self.max_concurrent, ">= 1")
        _require(self.mode in ("min", "max"), "search", "mode", self.mode, "min or max")
        _require(self.grace_period >= 1, "search", "grace_period", self.grace_period, ">= 1")
        _require(
            self.reduction_factor >= 2, "search", "reduction_factor", self.reduction_factor, ">= 2"
        )
        _require(bool(self.space), "search", "space", self.space, "at least one parameter")
        for key, spec in self.space.items():
            where = f"space.{key}"
            _require(
                key.split(".", 1)[0] in ("train", "model") and "." in key,
                "search",
                where,
                key,
                "a train.FIELD or model.FIELD key",
            )
            kind = spec.get("distribution")
            _require(kind in SEARCH_DISTRIBUTIONS, "search", where, kind, str(SEARCH_DISTRIBUTIONS))
            if kind == "choice":
                _require(bool(spec.get("values")), "search", where, spec, "a non-empty values list")
            else:
                low, high = spec.get("low"), spec.get("high")
                _require(
                    isinstance(low, int | float) and isinstance(high, int | float) and low < high,
                    "search",
                    where,
                    spec,
                    "numeric low < high",
                )
                _require(
                    kind != "loguniform" or low > 0, "search", where, spec, "low > 0 for loguniform"
                )


@dataclass(frozen=True)
class FaultSpec:
    """Deliberate failures: ``fail_at_epoch`` raises once, in a trial not restored from a
    checkpoint, right after that epoch's checkpoint (so the retry resumes from it)."""

    fail_at_epoch: int | None = None


@dataclass(frozen=True)
class PlatformConfig:
    task: TaskSpec
    model: ModelSpec
    train: dict[str, Any]
    data: DataSpec
    tracking: TrackingSpec
    cluster: ClusterSpec
    ablation: AblationSpec
    search: SearchSpec | None
    fault: FaultSpec
    raw: dict[str, Any]

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
    )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PlatformConfig:
        """Validate a composed config; :class:`ConfigError` on any unknown key or bad value."""
        values = dict(values)
        unknown = sorted(set(values) - set(cls.SECTIONS))
        if unknown:
            raise ConfigError(f"unknown section(s) {unknown}; known: {list(cls.SECTIONS)}")
        ablation = dict(values.get("ablation") or {})
        for key in ("variants", "seeds"):
            if key in ablation:
                ablation[key] = tuple(ablation[key])
        search_values = values.get("search")
        # null in the train and model.overrides sections means "the variant's value".
        train_values = {k: v for k, v in (values.get("train") or {}).items() if v is not None}
        model_values = dict(values.get("model") or {})
        model_values["overrides"] = {
            k: v for k, v in (model_values.get("overrides") or {}).items() if v is not None
        }
        config = cls(
            task=_build(TaskSpec, values.get("task"), "task"),
            model=_build(ModelSpec, model_values, "model"),
            train=train_values,
            data=_build(DataSpec, values.get("data"), "data"),
            tracking=_build(TrackingSpec, values.get("tracking"), "tracking"),
            cluster=_build(ClusterSpec, values.get("cluster"), "cluster"),
            ablation=_build(AblationSpec, ablation, "ablation"),
            search=_build(SearchSpec, search_values, "search") if search_values else None,
            fault=_build(FaultSpec, values.get("fault"), "fault"),
            raw=values,
        )
        model, train = config.linc_configs()  # overrides are checked here, before any trial
        if train.init == "reference":
            reason = reference_initialisation_unsupported(model)
            _require(reason is None, "train", "init", train.init, f"not for this model: {reason}")
        _require(
            config.data.eval_source != "validation" or train.validation_size > 0,
            "train",
            "validation_size",
            train.validation_size,
            "> 0 when data.eval_source=validation (or pick another eval_source)",
        )
        return config

    def linc_configs(self) -> tuple[ModelConfig, TrainConfig]:
        """The variant's ``ModelConfig`` and ``TrainConfig`` under this config's ``train`` and
        ``model.overrides`` (which never override a switch the variant itself sets)."""
        train_fields = {f.name for f in fields(TrainConfig)}
        unknown = sorted(set(self.train) - train_fields)
        if unknown:
            raise ConfigError(f"train: unknown key(s) {unknown}; known: {sorted(train_fields)}")
        model_fields = {f.name for f in fields(ModelConfig)} - {"problem"}
        unknown = sorted(set(self.model.overrides) - model_fields)
        if unknown:
            raise ConfigError(
                f"model.overrides: unknown key(s) {unknown}; known: {sorted(model_fields)}"
            )
        try:
            return variant_configs(
                self.model.variant,
                self.task.problem,  # type: ignore[arg-type]
                train=self.train,
                model=self.model.overrides,
            )
        except (TypeError, ValueError) as err:
            raise ConfigError(f"model/train: {err}") from None

    def with_values(self, **dotted: Any) -> dict[str, Any]:
        """A copy of the raw mapping with ``section.key`` values replaced (``model.variant``)."""
        return with_dotted(self.raw, dotted)

    def tracking_uri(self, storage_base: Path | None = None) -> str:
        """Explicit ``tracking.uri``, else ``$MLFLOW_TRACKING_URI``, else SQLite in storage."""
        if self.tracking.uri:
            return self.tracking.uri
        if os.environ.get("MLFLOW_TRACKING_URI"):
            return os.environ["MLFLOW_TRACKING_URI"]
        storage = self.cluster.storage_path(storage_base)
        if "://" in storage:
            raise ConfigError(
                f"tracking.uri: required when cluster.storage is remote ({storage!r}); set it "
                "or MLFLOW_TRACKING_URI"
            )
        Path(storage).mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{Path(storage) / 'mlflow.db'}"


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


def _deep_copy(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in values.items()}


__all__ = [
    "AblationSpec",
    "ClusterSpec",
    "ConfigError",
    "DataSpec",
    "FaultSpec",
    "ModelSpec",
    "PlatformConfig",
    "SearchSpec",
    "TaskSpec",
    "TrackingSpec",
    "with_dotted",
]
