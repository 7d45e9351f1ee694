"""The sections of the platform's configuration, each a typed, validated dataclass.

Each section is built from its part of the composed mapping with
:func:`linc_core.utils.typed.build` (unknown keys and bad values raise
:class:`~linc_core.utils.typed.ConfigError` naming the section, the key and the value);
:class:`orchestration.config.platform.PlatformConfig` puts them together.

Sections (see ``sweeps/conf/config.yaml`` for the defaults and their meaning):

* ``task``: problem and instance size of generated training data.
* ``model``: the variant (a preset of ``linc_core.presets.PRESETS``) and field overrides.
* ``train``: a protocol (``linc_core.runs.protocols``) and ``TrainConfig`` settings (under the
  variant's own switches).
* ``data``: where training, validation and final-evaluation instances come from.
* ``tracking``: MLflow store and experiment.
* ``cluster``: Ray address, trial resources, data-parallel workers, retries, Tune storage.
* ``ablation``, ``search``: what a sweep varies (:mod:`orchestration.config.sweep_sections`).
* ``fault``: deliberate failures, for testing retries (off by default).
* ``console``: what a sweep prints (one line per trial event, or Tune's own output).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from linc_core.config import ProblemName
from linc_core.runs.plan import MAX_CUSTOMERS, DataSource, EvaluationSource
from linc_core.utils.files import PLAIN_NAME_PATTERN
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import check_fields, require

# A user-given name that becomes one component of a path or URI: a sweep's folder under
# cluster.storage (its Tune experiment), a search's Optuna study, a registered model
# (models:/NAME), a tag in an MLflow filter. ASCII letters, digits, '_', '.' and '-', not
# starting with '.' or '-': never '..', '/', '\\', a hidden file, an option or a quote, so a name
# cannot reach outside the folder it is joined to, whatever a shell or URL decoding made of it.
NAME_PATTERN = PLAIN_NAME_PATTERN  # one rule for a name that becomes a path component
NAME_RULE = (
    "a name of letters, digits, '_', '.' and '-', not starting with '.' or '-' (one folder "
    "name: no '/'), at most 128 characters"
)
# The final-evaluation sets that hold instances of one problem whatever the task.
EVALUATION_SET_PROBLEMS = {"solomon50": "cvrptw"}


def is_safe_name(value: object) -> bool:
    """Whether ``value`` is a name that may become one path component (:data:`NAME_PATTERN`)."""
    return isinstance(value, str) and NAME_PATTERN.fullmatch(value) is not None


def require_name(key: str, value: object) -> None:
    """Raise ``ValueError("key: expected a name ..., got VALUE")`` unless ``value`` is one."""
    require(is_safe_name(value), key, value, NAME_RULE)


@dataclass(frozen=True)
class TaskSpec:
    """What is solved.

    Attributes:
        problem: the routing problem, a registered problem name (``cvrptw``, ``cvrp``, ``tsp``).
        num_customers: customers (cities, for TSP) per training instance.
    """

    problem: ProblemName = "cvrptw"
    num_customers: int = 20

    def __post_init__(self) -> None:
        check_fields(self)
        customers = self.num_customers
        require(
            2 <= customers <= MAX_CUSTOMERS, "num_customers", customers, f"2 to {MAX_CUSTOMERS}"
        )


@dataclass(frozen=True)
class ModelSpec:
    """The model.

    Attributes:
        variant: a preset of ``linc_core.presets.PRESETS`` (an ablation variant, ``polynet`` or
            ``pomo``); a sweep over variants sets it per trial.
        overrides: ``ModelConfig`` fields over the variant's (null keeps the variant's value).
    """

    variant: str = "full_linc"
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class DataSpec:
    """Training, validation and final-evaluation data.

    Attributes:
        source: ``generated`` (fresh seeded instances every batch, the paper's training),
            ``dataset`` (a Parquet data set written by ``linc-generate`` at ``uri``) or
            ``solomon50`` (the ablation protocol: the 56 Solomon instances cut to 50 customers).
        uri: the data set for ``source=dataset`` (local folder or ``s3://...``).
        seed: base seed of the training batches (generated ones, or a fixed set's per-epoch
            shuffle) and of the validation set, the same for every trial; null (the default):
            they follow each trial's ``train.seed`` as ``linc-train``'s do (the variants of one
            seed see the same batches, the seeds of a sweep are independent replicates). The
            final evaluation's decoding seed derives from it (0 when null): every trial of a
            sweep decodes each instance with the same z-vectors.
        eval_source: what the final checkpoint is evaluated on: ``validation`` (the validation
            set), ``dataset`` (``eval_uri``), ``solomon50``, ``benchmark`` (``eval_uri`` names
            a set or folder linc-eval reads: ``solomon100``, ``cvrplib_x``, ...; gaps to its
            best-known values) or ``none``.
        eval_uri: the evaluation data set for ``eval_source=dataset``, the set or folder for
            ``benchmark``.
        eval_rollouts: z vectors (or starts) per instance at the final evaluation.
        eval_augment: 1, or 8 for the dihedral augmentation.
        eval_decoding: ``greedy`` (per z), ``sampling`` or ``sgbs`` (``eval_rollouts`` greedy
            z-rollouts seed the beams); its mean cost is the run's ``eval_cost``.
        eval_also: more decodings of the same set, each logged under its name
            (``eval_cost_sgbs``, ``evaluation_rows_sgbs.csv``).
        eval_limit, eval_max_customers: a benchmark's first files (name order) and its
            instances up to that many customers; null: all.
        eval_pyvrp_seconds: PyVRP's time per evaluated instance for the reference solution the
            run's gap ``eval_gap_pyvrp_pct`` is measured against (solved once per instance and
            budget, cached); 0: none.
    """

    source: Literal["generated", "dataset", "solomon50"] = "generated"
    uri: str | None = None
    seed: int | None = None
    eval_source: Literal["validation", "dataset", "solomon50", "benchmark", "none"] = "validation"
    eval_uri: str | None = None
    eval_rollouts: int = 128
    eval_augment: Literal[1, 8] = 8
    eval_decoding: Literal["greedy", "sampling", "sgbs"] = "greedy"
    eval_pyvrp_seconds: float = 1.0
    eval_also: tuple[Literal["greedy", "sampling", "sgbs"], ...] = ()
    eval_limit: int | None = None
    eval_max_customers: int | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        for key, source in (("uri", self.source), ("eval_uri", self.eval_source)):
            value = getattr(self, key)
            require(
                source not in ("dataset", "benchmark") or bool(value),
                key,
                value,
                "a data set folder or s3:// URI for a dataset source (a set or folder for "
                "a benchmark)",
            )
        no_set = f"no data set while source is {self.source} (data=dataset trains on data.uri)"
        require(self.uri is None or self.source == "dataset", "uri", self.uri, no_set)
        require(self.eval_rollouts >= 1, "eval_rollouts", self.eval_rollouts, ">= 1")
        try:  # the evaluation's own rules (EvaluationSource's), under this section's names
            self.evaluation()
        except ValueError as err:  # its keys are ours without "eval_": "limit: expected ..."
            raise ValueError(f"eval_{err}") from None

    def for_task(self, task: TaskSpec, chosen: bool) -> DataSpec:
        """This data, its final evaluation on instances of the task's problem: a fixed set of
        another problem (a preset's ``solomon50``, CVRPTW's, under ``task=cvrp``) becomes the
        task's validation set when the user did not choose it; when they did (``chosen``), it
        is refused (a trial would train, then fail to evaluate, on every retry)."""
        problem = EVALUATION_SET_PROBLEMS.get(self.eval_source, task.problem)
        if problem == task.problem:
            return self
        require(
            not chosen,
            "eval_source",
            self.eval_source,
            f"a set of the task's {task.problem} instances ({self.eval_source} holds {problem} "
            f"ones): validation, dataset, benchmark with data.eval_uri, or none",
        )
        return dataclasses.replace(self, eval_source="validation")

    def source_of(self, task: TaskSpec) -> DataSource:
        """The training data (its seed None: the plan derives it from the training seed)."""
        return DataSource(self.source, task.problem, task.num_customers, self.seed, self.uri)

    def validation_seed(self) -> int | None:
        """The validation set's seed (None: the plan derives it from the training seed)."""
        return None if self.seed is None else derive_seed(self.seed, "validation-set")

    def evaluation(self) -> EvaluationSource:
        return EvaluationSource(
            self.eval_source,
            self.eval_uri,
            self.eval_rollouts,
            self.eval_augment,
            self.eval_decoding,
            derive_seed(self.seed or 0, "final-evaluation"),
            self.eval_pyvrp_seconds,
            self.eval_also,
            self.eval_limit,
            self.eval_max_customers,
        )


@dataclass(frozen=True)
class TrackingSpec:
    """MLflow.

    Attributes:
        uri: the tracking store; null: ``$MLFLOW_TRACKING_URI``, else a SQLite store in the
            storage folder (``orchestration.tracking.store.resolve_tracking_uri``). A password
            in it is masked in everything linc writes or prints (``linc_core.utils.secrets``).
        experiment: the MLflow experiment the runs go to (created if missing).
        artifact_location: where a new experiment keeps its artifacts (null: MLflow's default
            beside the store; ``s3://...`` for a server's artifacts on S3).
        parent_run_id: filled in by the sweep driver: the sweep's parent run, under which each
            trial's run is nested.
        sweep: filled in by the sweep driver: the sweep's name, a tag of every trial run.
        trial_number: filled in by a search's searcher: the trial's number in the search's
            Optuna study (its run's name starts with it; ``orchestration.experiment.study``).
        flush_timeout_s: how long a finished trial (or the driver) waits for an unreachable
            store to take its last records (``orchestration.tracking.writer``); what is left
            stays in the trial's final checkpoint.
        register: the model-registry name the sweep's best trial (lowest ``eval_cost``) is
            registered under at its end, as a pyfunc model (``orchestration.tracking.registry``);
            null: none.
    """

    uri: str | None = None
    experiment: str = "linc"
    artifact_location: str | None = None
    parent_run_id: str | None = None
    sweep: str | None = None
    trial_number: int | None = None
    flush_timeout_s: float = 600.0
    register: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        require(bool(self.experiment), "experiment", self.experiment, "a name")
        if self.register is not None:
            require_name("register", self.register)
        require(self.flush_timeout_s >= 0, "flush_timeout_s", self.flush_timeout_s, ">= 0")


@dataclass(frozen=True)
class ClusterSpec:
    """Where and with what a trial runs.

    Attributes:
        address: Ray address (null: ``$RAY_ADDRESS`` under ``ray job submit``, else a local
            Ray started on 127.0.0.1).
        num_cpus: CPUs of a local Ray (null: all).
        num_gpus: GPUs a local Ray declares (null: the ones it detects). On a node without
            CUDA a number still lets trials that reserve GPUs be scheduled (how the tests pack
            fractional-GPU trials); such a trial then fails at its start, naming the setting.
        cpus_per_trial, gpus_per_trial: resources of a single-worker trial (fractions allowed:
            ``gpus_per_trial: 0.25`` runs four trials on one GPU). A trial with GPUs trains on
            the GPU Ray gives it (``train.device`` null: ``cuda``).
        num_workers: data-parallel workers per trial (> 1 runs Ray Train's TorchTrainer).
        cpus_per_worker, gpus_per_worker: resources of each data-parallel worker.
        custom_resources: extra Ray resources every trial (or worker) requests, e.g. a
            node-type marker ``{"linc_worker": 1}``.
        max_concurrent_trials: 0 lets Tune run as many as resources allow.
        max_failures: retries of a failed trial, each restored from its last checkpoint; a
            trial whose input is refused (a shard unlike its manifest) is not retried.
        storage: Tune storage: a local folder (made absolute) or ``s3://bucket/prefix``.
        torch_threads: intra-op threads per trial (match ``cpus_per_trial`` on shared hosts).
        reuse_actors: a finished trial's process runs the next trial (Tune's ``reuse_actors``),
            which skips a new process and its imports (torch, MLflow, Ray Tune: seconds) per
            trial of a sweep.
        memory_per_trial_gb: the memory a trial reserves (Ray's ``memory`` resource), so that
            Tune never starts more trials on a node than fit; null: the plan's estimate
            (``orchestration.trial.resources``); 0: none (a cluster whose node types declare no
            memory to the autoscaler).
        pending_timeout_s: a trial that cannot be placed (no node has its resources) for this
            long fails, naming what it waited for; null waits for ever (an autoscaler's nodes).
        stall_timeout_s: a running trial that reports nothing for this long (and for three
            times its longest gap between reports so far) is hung (a stuck collective, a dead
            file system mount): it is ended with one line naming it and its last epoch, and
            retried from its checkpoint like any failed trial; null waits for ever. Above the
            longest epoch plus the final evaluation.
        preemption_grace_s: after a SIGTERM, how long a trial's process may take to checkpoint
            its current step before it ends (below the cluster's own grace period:
            infra/README.md).
        trust_unsealed_state: a re-run accepts Tune's saved state that has no seal (a sweep
            written before linc sealed it) and seals it; one run's setting, not the sweep's.
    """

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
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
    memory_per_trial_gb: float | None = None
    pending_timeout_s: float | None = 600.0
    stall_timeout_s: float | None = 3600.0
    preemption_grace_s: float = 30.0
    trust_unsealed_state: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        for key in ("cpus_per_trial", "gpus_per_trial", "cpus_per_worker", "gpus_per_worker"):
            require(getattr(self, key) >= 0, key, getattr(self, key), ">= 0")
        for key in ("num_workers", "torch_threads"):
            require(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        require(self.num_cpus is None or self.num_cpus >= 1, "num_cpus", self.num_cpus, ">= 1")
        require(self.num_gpus is None or self.num_gpus >= 0, "num_gpus", self.num_gpus, ">= 0")
        for key in ("max_concurrent_trials", "max_failures"):
            require(getattr(self, key) >= 0, key, getattr(self, key), ">= 0")
        require(bool(self.storage), "storage", self.storage, "a folder or URI")
        for name, amount in self.custom_resources.items():
            require(amount > 0, f"custom_resources.{name}", amount, "> 0")
        memory = self.memory_per_trial_gb
        require(memory is None or memory >= 0, "memory_per_trial_gb", memory, ">= 0 or null")
        timeout = self.pending_timeout_s
        require(timeout is None or timeout > 0, "pending_timeout_s", timeout, "> 0 or null")
        stall = self.stall_timeout_s
        require(stall is None or stall > 0, "stall_timeout_s", stall, "> 0 or null")
        require(self.preemption_grace_s >= 0, "preemption_grace_s", self.preemption_grace_s, ">= 0")

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
class FaultSpec:
    """Deliberate failures for the fault matrix, each once, in a trial not restored from a
    checkpoint, right after that epoch's checkpoint (so the retry resumes from it).

    Attributes:
        fail_at_epoch: the trial raises after this epoch.
        stall_at_epoch: the trial hangs after this epoch (sleeps, alive, reporting nothing: for
            ``cluster.stall_timeout_s``).
        memory_spike_gb: the trial allocates (and holds, training on) this much memory after
            its first epoch, for Ray's memory monitor to kill it.
    """

    fail_at_epoch: int | None = None
    stall_at_epoch: int | None = None
    memory_spike_gb: float | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        for key in ("fail_at_epoch", "stall_at_epoch"):
            value = getattr(self, key)
            require(value is None or value >= 1, key, value, ">= 1 or null")
        spike = self.memory_spike_gb
        require(spike is None or spike > 0, "memory_spike_gb", spike, "> 0 or null")


@dataclass(frozen=True)
class ConsoleSpec:
    """What a sweep prints (:mod:`orchestration.experiment.console`).

    Attributes:
        verbosity: ``events`` (one line per trial event and a summary), ``quiet`` (failures
            and the summary) or ``tune`` (Tune's own reporter and Ray's INFO logging too).
        report_every: epochs between a trial's progress lines (0: about ten per trial).
    """

    verbosity: Literal["quiet", "events", "tune"] = "events"
    report_every: int = 0

    def __post_init__(self) -> None:
        check_fields(self)
        require(self.report_every >= 0, "report_every", self.report_every, ">= 0")


__all__ = [
    "EVALUATION_SET_PROBLEMS",
    "NAME_PATTERN",
    "NAME_RULE",
    "ClusterSpec",
    "ConsoleSpec",
    "DataSpec",
    "FaultSpec",
    "ModelSpec",
    "TaskSpec",
    "TrackingSpec",
    "is_safe_name",
    "require_name",
]
