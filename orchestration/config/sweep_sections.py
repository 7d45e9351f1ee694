"""The sections that say what a sweep varies: the ablation's variants x seeds and the Optuna/ASHA
search, each a typed, validated dataclass (:mod:`orchestration.config.sections` holds the
others; :class:`orchestration.config.platform.PlatformConfig` puts them together)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from linc_core.metrics import (
    EPOCH_METRICS,
    GLOBAL_STEP,
    PEAK_RSS_GB,
    VALIDATION_COST,
    per_decoding,
    recorded,
)
from linc_core.presets import ABLATION_VARIANTS
from linc_core.runs.plan import RunPlan
from linc_core.utils.typed import check_fields, did_you_mean, require
from orchestration.config.sections import require_name

SearchDistribution = Literal["uniform", "loguniform", "choice", "randint"]


def reported_metrics(run: RunPlan, *, every_report: bool = False) -> tuple[str, ...]:
    """The metrics a trial of ``run`` reports to Tune: each epoch's record and the process's
    peak memory (``orchestration.trial.reports.TuneReportCallback``), with the last report
    its final evaluation's (``eval_cost``, ``eval_cost_sgbs`` of ``data.eval_also``...).

    ``every_report``: only the ones every report of these trials carries, what a search can
    rank by (Tune refuses a report without the search's metric): no ``eval_*``, and
    ``validation_cost`` only where every epoch validates."""
    # any trial may validate; every report validates only where a set is checked every epoch
    validated = not every_report or (
        run.validation.source != "none" and run.train.validation_every == 1
    )
    names = [
        m for m in (*EPOCH_METRICS, GLOBAL_STEP, PEAK_RSS_GB) if m != VALIDATION_COST or validated
    ]
    if run.evaluation.source != "none" and not every_report:
        evaluated = recorded("evaluation")
        names += evaluated
        names += [per_decoding(m, d) for d in run.evaluation.also for m in evaluated]
    return tuple(names)


@dataclass(frozen=True)
class AblationSpec:
    """An ablation: variants x seeds as one Tune experiment.

    Attributes:
        variants: the swept presets, or the name of a list (``paper``: the paper's twelve).
        seeds: the training seeds; every variant trains once per seed.
        compare_to: the variant the table's gaps are relative to (paired by seed and instance).
        name: the sweep's name: its Tune experiment, its folder under ``cluster.storage`` and its
            MLflow parent run.
        resume: a re-run of the same sweep resumes it (finished trials kept; with its own
            settings only); false starts a new experiment, refused where one of that name is
            saved.
    """

    variants: tuple[str, ...] = ABLATION_VARIANTS
    seeds: tuple[int, ...] = (1234,)
    compare_to: str = "full_linc"
    name: str = "ablation"
    resume: bool = True

    def __post_init__(self) -> None:
        check_fields(self)
        require_name("name", self.name)
        require(bool(self.seeds), "seeds", self.seeds, "at least one seed")
        require(
            self.compare_to in self.variants,
            "compare_to",
            self.compare_to,
            f"one of the swept variants {self.variants}",
        )


@dataclass(frozen=True)
class SearchSpec:
    """Optuna (TPE) through Tune's ``OptunaSearch``, in a persistent study, with ASHA early
    stopping (single objective).

    Attributes:
        name: the search's name: its Optuna study, its Tune experiment and its parent run.
        num_samples: how many finished trials the study should hold: re-running a search with a
            larger one adds only the missing trials.
        max_concurrent: trials run at once.
        metric: the objective, a metric every report of a trial carries (``validation_cost``,
            ``seconds`` per epoch...: :func:`reported_metrics`; not ``eval_cost``, which only
            the last report carries), or a list of them (a multi-objective search: its Pareto
            front, no early stopping).
        mode: ``min`` or ``max``, or one per metric.
        storage: the study's SQLAlchemy URL; null: ``optuna.db`` beside a SQLite tracking
            store, else in the local storage folder (:mod:`orchestration.experiment.study`).
        grace_period: epochs ASHA lets every trial train before it may stop one.
        reduction_factor: ASHA's halving rate: the share of trials kept at each rung is 1 over
            it.
        seed: the sampler's seed (TPE's draws).
        space: the searched keys: a dotted config key (``train.learning_rate``,
            ``model.overrides.scorer``) mapped to ``{"distribution": uniform, loguniform or
            randint, "low", "high"}`` or ``{"distribution": "choice", "values": [...]}``.
    """

    name: str = "hpo"
    num_samples: int = 8
    max_concurrent: int = 2
    metric: str | tuple[str, ...] = VALIDATION_COST
    mode: Literal["min", "max"] | tuple[Literal["min", "max"], ...] = "min"
    storage: str | None = None
    grace_period: int = 1
    reduction_factor: int = 2
    seed: int = 0
    space: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)
        require_name("name", self.name)
        for key in ("num_samples", "max_concurrent", "grace_period"):
            require(getattr(self, key) >= 1, key, getattr(self, key), ">= 1")
        require(self.reduction_factor >= 2, "reduction_factor", self.reduction_factor, ">= 2")
        require(bool(self.space), "space", self.space, "at least one parameter")
        require(bool(self.metrics), "metric", self.metric, "a metric or a list of metrics")
        require(
            len(self.modes) == len(self.metrics),
            "mode",
            self.mode,
            f"one mode (min or max) per metric ({len(self.metrics)})",
        )
        for key, spec in self.space.items():
            where = f"space.{key}"
            section = key.split(".", 1)[0]
            require(section in ("train", "model") and "." in key, where, key, "train.F or model.F")
            kind = spec.get("distribution")
            require(kind in get_args(SearchDistribution), where, kind, str(SearchDistribution))
            if kind == "choice":
                require(bool(spec.get("values")), where, spec, "a non-empty values list")
                continue
            low, high = spec.get("low"), spec.get("high")
            numbers = isinstance(low, int | float) and isinstance(high, int | float)
            require(numbers and low < high, where, spec, "numeric low < high")
            require(kind != "loguniform" or low > 0, where, spec, "low > 0 for loguniform")
            require(kind != "randint" or int(low) < int(high), where, spec, "int low < int high")

    def edges(self) -> list[tuple[str, str, Any]]:
        """``(key, which, value)`` for each value at the edges of what the search may give a
        trial: every choice, a range's ends as a trial receives them (floats for uniform and
        loguniform; randint's ints, ``high`` excluded as Tune's ``randint`` excludes it)."""
        found: list[tuple[str, str, Any]] = []
        for key, spec in self.space.items():
            kind = spec["distribution"]
            if kind == "choice":
                found += [(key, "choice", value) for value in spec["values"]]
            elif kind == "randint":
                found += [(key, "low", int(spec["low"])), (key, "high - 1", int(spec["high"]) - 1)]
            else:
                found += [(key, "low", float(spec["low"])), (key, "high", float(spec["high"]))]
        return found

    def require_reported(self, run: RunPlan, *, every_report: bool = False) -> None:
        """Raise ``ValueError`` naming a metric of the search that the trials of ``run`` do not
        report (a typo), and the ones they do; ``every_report``: that not every report of
        theirs carries (``eval_cost``: :func:`reported_metrics`), which a search cannot use."""
        known = reported_metrics(run, every_report=every_report)
        which = "every trial report carries" if every_report else "a trial reports"
        for metric in self.metrics:
            if metric not in known:
                raise ValueError(
                    f"metric: expected a metric {which} ({', '.join(known)}), got "
                    f"{metric!r}{did_you_mean(metric, known)}"
                )

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.metric,) if isinstance(self.metric, str) else tuple(self.metric)

    @property
    def modes(self) -> tuple[str, ...]:
        return (self.mode,) if isinstance(self.mode, str) else tuple(self.mode)

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1


__all__ = ["AblationSpec", "SearchDistribution", "SearchSpec", "reported_metrics"]
