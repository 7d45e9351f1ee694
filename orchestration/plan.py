"""The trial plan: what one Tune trial runs, resolved once from its config on the worker.

Tune hands each trial a plain mapping (the composed config with the trial's variant, seed or
searched values filled in: Tune needs a mapping for grid search, restore and Optuna).
:meth:`TrialPlan.from_mapping` resolves it once into the run (:class:`linc_core.plan.RunPlan`:
effective model and training configs, data, validation and evaluation sources) and the platform
around it: the tracking store (resolved URI, experiment, parent run, sweep), the resources and
the fault injection. The trainable then reads the plan and nothing else; the plan's
:meth:`~TrialPlan.params` are what the trial logs to MLflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from linc_core.plan import RunPlan
from orchestration.config import ClusterSpec, FaultSpec, PlatformConfig
from orchestration.tracking import flatten_params, resolve_tracking_uri


@dataclass(frozen=True)
class TrackingPlan:
    """The MLflow store a trial logs to, and where its run sits.

    Attributes:
        uri: the resolved tracking URI (the driver's, handed to every trial).
        experiment: the experiment's name.
        parent_run_id: the sweep's parent run, if the trial belongs to a sweep.
        sweep: the sweep's name (a tag of every trial run).
        flush_timeout_s: how long the trial waits at its end for the store to take its records.
    """

    uri: str
    experiment: str
    parent_run_id: str | None = None
    sweep: str | None = None
    flush_timeout_s: float = 600.0


@dataclass(frozen=True)
class TrialPlan:
    """The effective settings of one trial (see the module docstring)."""

    run: RunPlan
    tracking: TrackingPlan
    resources: ClusterSpec
    fault: FaultSpec

    @classmethod
    def from_config(cls, config: PlatformConfig) -> TrialPlan:
        """The plan of ``config``'s own trial; resolves (and creates) the tracking store."""
        tracking = TrackingPlan(
            resolve_tracking_uri(config.tracking.uri, config.cluster.storage_path()),
            config.tracking.experiment,
            config.tracking.parent_run_id,
            config.tracking.sweep,
            config.tracking.flush_timeout_s,
        )
        return cls(config.run, tracking, config.cluster, config.fault)

    @classmethod
    def from_mapping(
        cls,
        values: Mapping[str, Any],
        tracking: TrackingPlan | None = None,
        storage: str | None = None,
    ) -> TrialPlan:
        """Validate and resolve a trial's config (Tune's mapping).

        ``tracking`` and ``storage`` (the sweep driver's, decided on every run of the sweep)
        replace what the mapping says: a restored trial's mapping is the one it was first given,
        which may name another store or folder (a moved sweep, a changed ``tracking.uri``).
        """
        config = PlatformConfig.from_mapping(values)
        if storage is not None:
            cluster = dataclasses.replace(config.cluster, storage=storage)
            config = dataclasses.replace(config, cluster=cluster)
        if tracking is None:
            return cls.from_config(config)
        return cls(config.run, tracking, config.cluster, config.fault)

    @property
    def run_name(self) -> str:
        return f"{self.run.variant}-seed{self.run.train.seed}"

    def settings(self) -> dict[str, Any]:
        """The run's effective settings, the resources and the fault injection, nested."""
        return self.run.settings() | {
            "resources": dataclasses.asdict(self.resources),
            "fault": dataclasses.asdict(self.fault),
            "tracking": {"experiment": self.tracking.experiment, "sweep": self.tracking.sweep},
        }

    def params(self, data_id: str | None = None, **extra: Any) -> dict[str, str]:
        """The MLflow params: :meth:`settings` (plus ``data.id`` and ``extra`` sections)
        flattened to dotted keys; a setting that does not apply (None) is left out."""
        settings = self.settings() | extra
        if data_id is not None:
            settings["data"] = settings["data"] | {"id": data_id}
        return flatten_params(_without_none(settings))


def _without_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _without_none(v) if isinstance(v, Mapping) else v
        for k, v in values.items()
        if v is not None
    }


__all__ = ["TrackingPlan", "TrialPlan"]
