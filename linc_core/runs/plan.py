"""The run plan: the effective settings of one training run, resolved once, and what realises them.

:func:`resolve_run` turns a variant name, a protocol, explicit settings and the data choices
into a :class:`RunPlan`: the ``ModelConfig`` and ``TrainConfig`` the run trains with (the
variant's switches over explicit settings over the protocol over the defaults) and where its
training, validation and evaluation instances come from, each with its seed. The functions below
realise a plan, in the order a run needs them::

    data = training_data(plan)              # batches by (epoch, index)
    validation = validation_set(plan, data) # fixed instances decoded every validation_every
    policy = initial_policy(plan.model, plan.train)
    fit(policy, plan.train, data, validation=validation, data_id=data_id(plan))
    evaluation_set(plan, validation)        # the final evaluation's set, or None

``linc-train`` builds its plan from its flags, the platform (``orchestration.trial.plan``) from its
composed config; a data set on S3 is read through the ``open_filesystem`` the caller passes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow.fs as pafs

from linc_core.config import ModelConfig, ProblemName, TrainConfig, to_dict, unused_fields
from linc_core.evaluate.benchmark_sets import (
    SOLOMON50_CUSTOMERS,
    BenchmarkSet,
    load_benchmark,
    solomon50,
)
from linc_core.instances import Instance
from linc_core.instances.datasets import load_dataset, resolve_filesystem
from linc_core.model.reference_format import reference_initialisation_unsupported
from linc_core.presets import variant_configs
from linc_core.problems.spec import problem_spec
from linc_core.runs.protocols import protocol_named
from linc_core.train.budget import UNBOUNDED_EPOCHS
from linc_core.train.data import (
    FixedData,
    GeneratedData,
    ShardedTrainingData,
    TrainingData,
    generate,
)
from linc_core.train.precision import effective_precision
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import ConfigError, check_fields, require

# ``uri -> (filesystem, path inside it)``: how a data set location is opened.
FilesystemOpener = Callable[[str], tuple[pafs.FileSystem, str]]

SOLOMON50_DATA_ID = "solomon100-first50"
MAX_CUSTOMERS = 100_000  # per instance: the largest benchmarks have 1000; more is a typo


@dataclass(frozen=True)
class DataSource:
    """Where the training instances come from.

    Attributes:
        source: ``generated`` (fresh seeded instances every batch, the paper's training),
            ``dataset`` (a Parquet data set written by ``linc-generate`` at ``uri``) or
            ``solomon50`` (the 56 Solomon-100 instances cut to their first 50 customers).
        problem, num_customers: the task; generated instances have ``num_customers``.
        seed: the seed of the batch stream: the base seed of generated batches, or the seed of
            a fixed set's per-epoch shuffle. None: the stream follows the run's training seed,
            ``derive_seed(train.seed, "data")`` (``resolve_run`` fills it in), so the replicates
            of a multi-seed sweep are independent in their data too and the variants of one
            seed see the same batches.
        uri: the data set of ``source=dataset`` (a local folder or ``s3://...``).
    """

    source: Literal["generated", "dataset", "solomon50"] = "generated"
    problem: ProblemName = "cvrptw"
    num_customers: int = 20
    seed: int | None = None
    uri: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        customers = self.num_customers
        require(
            2 <= customers <= MAX_CUSTOMERS, "num_customers", customers, f"2 to {MAX_CUSTOMERS}"
        )
        require(
            self.source != "solomon50" or self.problem == "cvrptw",
            "problem",
            self.problem,
            "cvrptw for the solomon50 set",
        )
        sizes = problem_spec(self.problem).generated_sizes if self.source == "generated" else None
        require(  # refused here, not by every trial's generator after its retries
            sizes is None or self.num_customers in sizes,
            "num_customers",
            self.num_customers,
            f"a size {self.problem}'s generator makes, one of {list(sizes or ())}",
        )

    @property
    def customers_per_instance(self) -> int:
        """Customers of a training instance (Solomon-50's are 50 whatever the task's size)."""
        return SOLOMON50_CUSTOMERS if self.source == "solomon50" else self.num_customers


@dataclass(frozen=True)
class ValidationSource:
    """The fixed instances decoded (greedy per z, best of K) every ``validation_every`` epochs.

    Attributes:
        source: ``generated`` (``size`` seeded instances of the task), ``training_set`` (the
            fixed training set itself: the ablation protocol's training-set curve) or ``none``.
        size, seed: of a generated set.
    """

    source: Literal["generated", "training_set", "none"] = "none"
    size: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)
        require(
            (self.size > 0) == (self.source == "generated"),
            "size",
            self.size,
            "> 0 exactly when source=generated",
        )


@dataclass(frozen=True)
class EvaluationSource:
    """What the final policy is evaluated on, and with what decoding budget.

    Attributes:
        source: ``validation`` (the validation set), ``dataset`` (``uri``), ``solomon50``,
            ``benchmark`` (``uri`` names a set or folder ``load_benchmark`` reads:
            ``solomon100``, ``cvrplib_x``, ``tsplib``, a folder of files; costs in the set's
            convention, gaps to its best-known values) or ``none``.
        uri: the evaluation data set of ``source=dataset``, the set of ``source=benchmark``.
        rollouts: z vectors (or POMO starts) per instance.
        augment: 1, or 8 for the dihedral augmentation.
        decoding: ``greedy`` (per z), ``sampling`` or ``sgbs`` (beam 4, expansion 4, from
            ``rollouts`` greedy z-rollouts: ``DecodeConfig``'s reference settings); its
            result is the run's ``eval_cost``.
        also: further decodings of the same set, each logged beside the first under its name
            (``eval_cost_sgbs``, ``evaluation_rows_sgbs.csv``): the main table's SGBS column.
        seed: the decoding's seed.
        pyvrp_seconds: PyVRP's time per instance for the reference solution every evaluated
            instance is also solved with (cached: ``linc_core.evaluate.pyvrp_cache``), so that
            each run has a gap to a strong solution (``eval_gap_pyvrp_pct``); 0: none.
        limit: ``source=benchmark``: keep the set's first ``limit`` files (name order).
        max_customers: ``source=benchmark``: keep the instances with at most this many
            customers.
    """

    source: Literal["validation", "dataset", "solomon50", "benchmark", "none"] = "none"
    uri: str | None = None
    rollouts: int = 128
    augment: Literal[1, 8] = 8
    decoding: Literal["greedy", "sampling", "sgbs"] = "greedy"
    seed: int = 0
    pyvrp_seconds: float = 0.0
    also: tuple[Literal["greedy", "sampling", "sgbs"], ...] = ()
    limit: int | None = None
    max_customers: int | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        require(self.pyvrp_seconds >= 0, "pyvrp_seconds", self.pyvrp_seconds, ">= 0")
        require(
            self.source != "benchmark" or bool(self.uri),
            "uri",
            self.uri,
            "a set (solomon100, cvrplib_x, tsplib) or folder for a benchmark source",
        )
        require(
            self.decoding not in self.also and len(set(self.also)) == len(self.also),
            "also",
            self.also,
            f"decodings other than {self.decoding!r}, each once",
        )
        for key in ("limit", "max_customers"):
            value = getattr(self, key)
            require(value is None or value >= 1, key, value, ">= 1 or null")

    @property
    def decodings(self) -> tuple[str, ...]:
        """Every decoding of the evaluation, the one ``eval_cost`` reports first."""
        return (self.decoding, *self.also)


@dataclass(frozen=True)
class RunPlan:
    """The effective settings of one training run (see the module docstring)."""

    variant: str
    protocol: str | None
    model: ModelConfig
    train: TrainConfig
    data: DataSource
    validation: ValidationSource
    evaluation: EvaluationSource

    def settings(self, in_effect: bool = False) -> dict[str, Any]:
        """Every effective setting as a nested plain mapping; ``in_effect``: without the
        fields the run never reads under its switches (``linc_core.config.unused_fields``),
        what a run logs as its params."""

        def fields_of(config: ModelConfig | TrainConfig) -> dict[str, Any]:
            values = to_dict(config)
            skip = unused_fields(config) if in_effect else frozenset()
            return {k: v for k, v in values.items() if k not in skip}

        return {
            "variant": self.variant,
            "protocol": self.protocol,
            "model": fields_of(self.model),
            "train": fields_of(self.train),
            "data": dataclasses.asdict(self.data),
            "validation": dataclasses.asdict(self.validation),
            "evaluation": dataclasses.asdict(self.evaluation),
        }


def resolve_run(
    variant: str,
    data: DataSource,
    *,
    protocol: str | None = None,
    train: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
    validation: Literal["generated", "training_set"] = "generated",
    validation_seed: int | None = None,
    evaluation: EvaluationSource | None = None,
) -> RunPlan:
    """The plan of a run of preset ``variant`` on ``data``.

    Args:
        variant: a preset of ``linc_core.presets.PRESETS``.
        data: the training set.
        protocol: a name of ``linc_core.runs.protocols.PROTOCOLS`` (its ``data`` must be ``data``'s
            source): its ``TrainConfig`` settings apply under ``train``.
        train, model: explicit ``TrainConfig`` settings and ``ModelConfig`` overrides; every
            variant gets them except where it sets that switch itself.
        validation: ``generated``: ``train.validation_size`` instances of the task drawn with
            ``validation_seed`` (none for size 0; None: ``derive_seed(train.seed,
            "validation-set")``); ``training_set``: the fixed training set.
        evaluation: the final evaluation (default: none).

    Raises:
        ConfigError: naming the setting at fault (``train.init``, ``model.overrides.scorer``).
    """
    train = dict(train or {})
    if train.get("budget_minutes") is not None and train.get("epochs") is None:
        train["epochs"] = UNBOUNDED_EPOCHS  # the budget ends the run, not the protocol's epochs
    protocol_train: Mapping[str, Any] = {}
    if protocol is not None:
        named = protocol_named(protocol)
        if named.data != data.source:
            raise ConfigError(
                f"train.protocol: {protocol!r} trains on data source {named.data!r}, "
                f"got data source {data.source!r}"
            )
        protocol_train = named.train
    model_config, train_config = variant_configs(
        variant, data.problem, train={**protocol_train, **train}, model=dict(model or {})
    )
    if train_config.init == "reference":
        reason = reference_initialisation_unsupported(model_config)
        if reason is not None and "init" in train:
            raise ConfigError(f"train.init: 'reference' is not for this model: {reason}")
        if reason is not None:  # the protocol's default: only where the reference builds it
            train_config = dataclasses.replace(train_config, init="linc")
    # What the run will use, not "auto": the precision its device resolves it to.
    precision = effective_precision(train_config.precision, train_config.device)
    train_config = dataclasses.replace(train_config, precision=precision)
    if data.seed is None:
        data = dataclasses.replace(data, seed=derive_seed(train_config.seed, "data"))
    if validation_seed is None:
        validation_seed = derive_seed(train_config.seed, "validation-set")
    if train_config.multi_start:  # POMO: rollout k starts at customer k, so K <= customers
        rollouts = min(train_config.num_rollouts, data.customers_per_instance)
        train_config = dataclasses.replace(train_config, num_rollouts=rollouts)
    if validation == "training_set":
        if data.source != "solomon50":  # the one fixed training set
            raise ConfigError(
                f"data.source: expected solomon50 to validate on the training set, "
                f"got {data.source!r}"
            )
        validation_source = ValidationSource("training_set")
    elif train_config.validation_size > 0:
        validation_source = ValidationSource(
            "generated", train_config.validation_size, validation_seed
        )
    else:
        validation_source = ValidationSource("none")
    evaluation = evaluation or EvaluationSource()
    if evaluation.source == "validation" and validation_source.source == "none":
        raise ConfigError(
            f"train.validation_size: expected > 0 when the final evaluation is on the "
            f"validation set (or evaluate on another set), got {train_config.validation_size}"
        )
    return RunPlan(
        variant,
        protocol,
        model_config,
        train_config,
        data,
        validation_source,
        evaluation,
    )


def training_data(
    plan: RunPlan, open_filesystem: FilesystemOpener = resolve_filesystem
) -> TrainingData:
    """The plan's training batches (a pure function of (seed, epoch, index))."""
    data, train = plan.data, plan.train
    if data.source == "dataset":
        assert data.uri is not None
        filesystem, root = open_filesystem(data.uri)
        return ShardedTrainingData(root, train.batch_size, data.seed, filesystem=filesystem)
    if data.source == "solomon50":
        return FixedData(Instance.concat(solomon50()), train.batch_size, data.seed)
    return GeneratedData(
        data.problem, data.num_customers, train.batch_size, train.instances_per_epoch, data.seed
    )


def data_id(plan: RunPlan, open_filesystem: FilesystemOpener = resolve_filesystem) -> str:
    """What identifies the training data in checkpoints and tracking: a data set's manifest
    checksum (``sha256:...``; the manifest lists every shard's hash), else the source."""
    data = plan.data
    if data.source == "dataset":
        assert data.uri is not None
        filesystem, root = open_filesystem(data.uri)
        with filesystem.open_input_stream(f"{root.rstrip('/')}/manifest.json") as stream:
            return "sha256:" + hashlib.sha256(stream.read()).hexdigest()
    if data.source == "solomon50":
        return SOLOMON50_DATA_ID
    return f"generated:{data.problem}{data.num_customers}:seed{data.seed}"


def validation_set(plan: RunPlan, data: TrainingData) -> Instance | None:
    """The fixed validation instances (``[V]``), or None; ``data`` is the plan's training data."""
    source = plan.validation
    if source.source == "training_set":
        assert isinstance(data, FixedData)
        return data.instances
    if source.source == "generated":
        return generate(plan.data.problem, source.size, plan.data.num_customers, source.seed)
    return None


def evaluation_set(
    plan: RunPlan,
    validation: Instance | None,
    open_filesystem: FilesystemOpener = resolve_filesystem,
) -> BenchmarkSet | None:
    """The final evaluation's instances (``[1]`` each), their name, cost convention and
    best-known values, or None (``source=none``)."""
    source = plan.evaluation
    if source.source == "benchmark":
        assert source.uri is not None
        return load_benchmark(source.uri, limit=source.limit, max_customers=source.max_customers)
    if source.source == "validation":
        assert validation is not None
        batch, name = validation, f"validation:{plan.data.problem}{plan.data.num_customers}"
    elif source.source == "solomon50":
        batch, name = Instance.concat(solomon50()), "solomon50"
    elif source.source == "dataset":
        assert source.uri is not None
        filesystem, root = open_filesystem(source.uri)
        batch, name = load_dataset(root, filesystem), source.uri
    else:
        return None
    if batch.names is None:  # rows named as the evaluation names them (row0, row1, ...)
        batch = dataclasses.replace(batch, names=tuple(f"row{i}" for i in range(batch.batch_size)))
    return BenchmarkSet(name, "exact", [batch.select([i]) for i in range(batch.batch_size)])


__all__ = [
    "MAX_CUSTOMERS",
    "SOLOMON50_DATA_ID",
    "DataSource",
    "EvaluationSource",
    "FilesystemOpener",
    "RunPlan",
    "ValidationSource",
    "data_id",
    "evaluation_set",
    "resolve_run",
    "solomon50",
    "training_data",
    "validation_set",
]
