"""The one tracking object: where a run's records go, resolved once and handed down.

The sweep driver resolves it from the config (:meth:`TrackingTarget.resolve`: the store's URI
and the experiment), adds the sweep's parent run and name (:meth:`~TrackingTarget.in_sweep`),
and hands it to every trial (``tune.with_parameters``): a trial never resolves the store
again. What reaches MLflow goes through this object: a run writer for a run
(:meth:`~TrackingTarget.writer`), the experiment's id (:meth:`~TrackingTarget.experiment_id`),
the runs under a sweep's parent run (:meth:`~TrackingTarget.child_runs`).

The URI may hold a password (``postgresql://linc:PASSWORD@db/mlflow``): the target's ``repr``
masks it, and every process that holds a target (a trial unpickles it from Ray's object store)
has learnt it, so that its masking of text finds it (:mod:`linc_core.utils.secrets`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linc_core.utils.secrets import learn_secrets, redact
from orchestration.config.sections import TrackingSpec
from orchestration.tracking.store import (
    PARENT_RUN_TAG,
    TRIAL_TAG,
    ensure_experiment,
    resolve_tracking_uri,
    save_sweep_view,
)
from orchestration.tracking.writer import RunWriter


@dataclass(frozen=True)
class TrackingTarget:
    """The MLflow store and experiment runs are written to, and where a trial's run sits.

    Attributes:
        uri: the resolved tracking URI (the driver's, handed to every trial).
        experiment: the experiment's name.
        parent_run_id: the sweep's parent run, if the trial belongs to a sweep.
        sweep: the sweep's name (a tag of every trial run).
        flush_timeout_s: how long a finished trial (or the driver) waits for the store to take
            its last records.
        run_name_keys: the config keys whose values a trial's run name carries beside its
            variant and seed (a search's parameters).
    """

    uri: str
    experiment: str
    parent_run_id: str | None = None
    sweep: str | None = None
    flush_timeout_s: float = 600.0
    run_name_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        learn_secrets(self.uri)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)  # unpickled in a trial: its secrets learnt there too
        learn_secrets(self.uri)

    def __repr__(self) -> str:
        return f"TrackingTarget({redact(self.uri)!r}, {self.experiment!r}, sweep={self.sweep!r})"

    @property
    def shown_uri(self) -> str:
        """The URI as messages and records show it (its password masked)."""
        return redact(self.uri)

    @classmethod
    def resolve(cls, spec: TrackingSpec, storage: str) -> TrackingTarget:
        """The target of ``spec``: its store (``resolve_tracking_uri``; a local SQLite store in
        ``storage`` is created) and experiment, outside any sweep."""
        uri = resolve_tracking_uri(spec.uri, storage)
        return cls(uri, spec.experiment, spec.parent_run_id, spec.sweep, spec.flush_timeout_s)

    def in_sweep(
        self, parent_run_id: str | None, sweep: str, run_name_keys: tuple[str, ...] = ()
    ) -> TrackingTarget:
        """This target for the trials of sweep ``sweep``, nested under ``parent_run_id``, their
        runs named by ``run_name_keys`` too."""
        return dataclasses.replace(
            self, parent_run_id=parent_run_id, sweep=sweep, run_name_keys=run_name_keys
        )

    def experiment_id(self) -> str:
        """The experiment's id, created if missing (``ensure_experiment``)."""
        return ensure_experiment(self.uri, self.experiment)

    def save_sweep_view(self, sweep: dict[str, Any]) -> None:
        """Save sweep ``sweep``'s view of the runs table on the experiment, the one it opens
        on (``orchestration.tracking.store.save_sweep_view``)."""
        save_sweep_view(self.client(), self.experiment_id(), sweep)

    def client(self) -> Any:
        """An ``MlflowClient`` of the store (for reads; writes go through :meth:`writer`)."""
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def writer(self, spool: str | Path | None = None) -> RunWriter:
        """A new run writer on this store (``spool``: its local journal folder)."""
        return RunWriter(self.uri, spool=spool)

    def child_runs(self, parent_run_id: str, *, running_only: bool = False) -> list[Any]:
        """The runs nested under ``parent_run_id`` in this experiment (RUNNING ones only)."""
        where = f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}'"
        if running_only:
            where += " and attributes.status = 'RUNNING'"
        return self.client().search_runs([self.experiment_id()], filter_string=where)

    def trial_run_id(self, parent_run_id: str, trial_id: str) -> str | None:
        """The id of Tune trial ``trial_id``'s run under ``parent_run_id`` (None: none yet)."""
        where = f"tags.`{PARENT_RUN_TAG}` = '{parent_run_id}' and tags.`{TRIAL_TAG}` = '{trial_id}'"
        found = self.client().search_runs([self.experiment_id()], where, max_results=1)
        return found[0].info.run_id if found else None


__all__ = ["TrackingTarget"]
