"""A sweep's MLflow runs, seen from its driver, behind one object: :class:`SweepRuns`.

The parent run. The sweep's folder records (``linc_sweep.json``, read and written by the
sweep's :class:`~orchestration.experiment.folder.SweepFolder`) the parent run's id, the tracking
store (its URI masked: ``postgresql://linc:***@db/mlflow``, and compared masked) and the folder
it was written for. A re-run of the same command re-opens that parent run only where it belongs:

* the same store and the same folder: an interrupted sweep resumed, the same parent run;
* another store that holds the recorded run (the store was moved with the folder: the default
  SQLite file lives in the storage folder): the same run, in its new place;
* otherwise (a copied folder with the original's store, a changed ``tracking.uri``): a new parent
  run in the current store, with a warning; the restored trials follow (their runs are found by
  parent and trial id, so they too start anew in the current store and re-log their history from
  their checkpoints). Nothing is written into the store or runs the record names.

The trials. :meth:`SweepRuns.for_trials` is the tracking target handed to every trial: the
store, the experiment, the parent run and the sweep's name; each trial writes its own run.

The settlement (:meth:`SweepRuns.settle`), at the end: replay what trials could not deliver (the
journals in their final checkpoints), settle every trial run still RUNNING from its trial's Tune
result (KILLED when the sweep was stopped; FINISHED, tagged ``stopped_early``, when its scheduler
stopped it; FAILED when its trial failed), tag each trial run with its final checkpoint, run the
caller's report, summarise the sweep on its parent run, register the best trial's policy, and
set the parent's status, whatever the store does: every write goes through a
:class:`~orchestration.tracking.writer.RunWriter`.

The best trial (:class:`BestChoice`): an ablation's is its FINISHED trial run with the lowest
``eval_cost``; a search names its own (the study's best trial by its objective), and the
parent's ``best_eval_cost`` is that trial's, like every ``best_*`` of a search. A
multi-objective search has no single best: no ``best_*`` on its parent, the run it registers
(the Pareto front's lowest ``eval_cost``) tagged ``registered_run``, not ``best_run``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from linc_core.metrics import (
    BEST_EVAL_COST,
    EPOCH,
    EVAL_COST,
    TRIALS,
    TRIALS_FAILED,
    TRIALS_FINISHED,
)
from linc_core.train.checkpoint import git_commit
from linc_core.utils.secrets import redact
from orchestration.failures import SweepRefused, one_line
from orchestration.tracking.journal import run_description
from orchestration.tracking.records import reason
from orchestration.tracking.registry import register_run
from orchestration.tracking.store import PARENT_RUN_TAG, TRIAL_TAG, checkpoint_uri
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import JOURNAL_FILE, RunWriter
from orchestration.trial.plan import changed_settings

logger = logging.getLogger(__name__)

NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)


@dataclass(frozen=True)
class BestChoice:
    """The trial run a sweep calls best and registers (see the module docstring).

    Attributes:
        run_id: the chosen trial run (None: the FINISHED trial run with the lowest eval_cost).
        why: the registered version's ``chosen`` tag.
        single: whether the sweep has one best (False: a multi-objective search).
    """

    run_id: str | None = None
    why: str = "lowest eval_cost"
    single: bool = True


@dataclass
class SweepRuns:
    """The parent run of sweep ``name`` (``parent``) in ``tracking``'s store, its trials' runs."""

    tracking: TrackingTarget
    name: str
    parent: RunWriter
    folder: str  # the sweep's folder, as the record names it
    best: BestChoice = field(default_factory=BestChoice)  # a search chooses before the end
    _registered_run: str | None = None

    @classmethod
    def open(
        cls,
        tracking: TrackingTarget,
        sweep: dict[str, Any],
        params: dict[str, str],
        folder: str,
        recorded: dict[str, Any] | None,
    ) -> SweepRuns:
        """The sweep's runs, its parent run re-opened from ``recorded`` (the folder's record of a
        resumed sweep, None: a new sweep) where it belongs, else new with ``params`` (the
        sweep's base trial's settings and what the sweep varies).

        Raises:
            SweepRefused: the store does not take the run (nothing else ran yet).
        """
        name = sweep["name"]
        try:
            found = _recorded_run(tracking, recorded, folder, name, params) if recorded else None
            if recorded and found is None:
                logger.warning(
                    "sweep %s was recorded for store %s at %s; this run uses store %s at %s: "
                    "continuing with a new parent run there (the recorded runs are left as "
                    "they are)",
                    name,
                    redact(str(recorded.get("tracking_uri"))),
                    recorded.get("experiment_path"),
                    tracking.shown_uri,
                    folder,
                )
            # the sweep's own view of the runs table, in the UI's Views menu (see store.py)
            tracking.save_sweep_view(sweep)
            if found is not None:
                # RUNNING again only once Tune has restored the sweep: a sweep that cannot be
                # restored keeps the status it had
                return cls(tracking, name, tracking.writer().attach(found), folder)
            experiment_id = tracking.experiment_id()
            tags = {"sweep": name, "kind": "sweep"}
            run = tracking.client().create_run(experiment_id, run_name=name, tags=tags)
        except SweepRefused:
            raise
        except Exception as err:  # the store answered the pre-flight, then stopped answering
            told = f"tracking.uri: the store {tracking.shown_uri} did not take the sweep's run"
            raise SweepRefused(f"{told} ({one_line(err)})") from None
        parent = tracking.writer().attach(run.info.run_id)
        parent.log_params(params)
        return cls(tracking, name, parent, folder)

    @property
    def record(self) -> dict[str, Any]:
        """What the sweep's folder records of its runs (``linc_sweep.json``)."""
        return {
            "parent_run_id": self.parent.run_id,
            "name": self.name,
            "tracking_uri": self.tracking.shown_uri,
            "experiment_path": self.folder,
        }

    def for_trials(self, run_name_keys: tuple[str, ...] = ()) -> TrackingTarget:
        """The target handed to every trial: this store, under the parent run; trial runs named
        by their variant, seed and ``run_name_keys``' values."""
        return self.tracking.in_sweep(self.parent.run_id, self.name, run_name_keys)

    def close(self, timeout_s: float) -> None:
        """End the writer without touching the parent's status (nothing of the sweep ran)."""
        self.parent.close(timeout_s)

    def settle(
        self,
        results: list[Any],
        *,
        status: str,
        timeout_s: float,
        texts: dict[str, str] | None = None,
        metrics: dict[str, float] | None = None,
        report: Callable[[SweepRuns], None] | None = None,
        register: str | None = None,
        description: str | None = None,
    ) -> str | None:
        """The end of the sweep (see the module docstring); ``status``: the parent's (FINISHED,
        FAILED or KILLED: then trial runs still RUNNING end KILLED and nothing is registered);
        ``texts`` (artifact name -> text) and ``metrics`` go on the parent run first. Returns
        the registered model as ``NAME/VERSION`` (None: none)."""
        for name, text in (texts or {}).items():
            self.parent.log_text(text, name)
        if metrics:
            self.parent.log_metrics(metrics)
        for result in results:
            self._replay_journal(result, timeout_s)
        children = self._children()
        self._settle_running(children, results, status == "KILLED", timeout_s)
        self._tag_checkpoints(children, results)
        if report is not None:
            report(self)
        self._summarize(results, children)
        model = None
        if register and status != "KILLED":
            model = self.register_best(register)
        self._describe(description, model)
        self.parent.set_status(status)
        self.parent.close(timeout_s)
        return model

    def _children(self) -> list[Any]:
        try:
            return self.tracking.child_runs(self.parent.run_id)
        except Exception as err:  # noqa: BLE001 - the store's trouble costs the bookkeeping only
            logger.warning(
                "tracking store %s: could not list the sweep's trial runs to settle them: %s",
                self.tracking.shown_uri,
                reason(err),
            )
            return []

    def _replay_journal(self, result: Any, timeout_s: float) -> None:
        """Deliver what a finished trial's final checkpoint says its run never received."""
        checkpoint = getattr(result, "checkpoint", None)
        trial_id = (result.metrics or {}).get("trial_id")
        if checkpoint is None or not isinstance(trial_id, str):
            return
        try:  # the journal alone first: most trials delivered everything themselves
            with checkpoint.filesystem.open_input_stream(f"{checkpoint.path}/{JOURNAL_FILE}") as f:
                journal = json.loads(f.read())
                if not journal.get("pending"):
                    return
            with checkpoint.as_directory() as folder:  # with the artifact files it names
                # the trial's own run, found by the key the trial gave it (not the journal's
                # id), or made with the journal's name and tags when the trial never made it
                key = {TRIAL_TAG: trial_id, PARENT_RUN_TAG: self.parent.run_id}
                name, tags = run_description(journal, trial_id)
                writer = self.tracking.writer()
                writer.start(self.tracking.experiment, name, tags, key, journal=folder)
        except (OSError, ValueError) as err:
            if not isinstance(err, FileNotFoundError):
                logger.warning(
                    "could not read the tracking journal of %s: %s", checkpoint.path, err
                )
            return
        writer.close(timeout_s)

    def _settle_running(
        self, children: list[Any], results: list[Any], stopped: bool, timeout_s: float
    ) -> None:
        """Every trial run still RUNNING (its trial ended without saying how) gets its status
        from the trial's Tune result (see the module docstring)."""
        outcomes = {}
        for result in results:
            metrics = result.metrics or {}
            if metrics.get("trial_id") is not None:
                outcomes[metrics["trial_id"]] = (result.error is None, metrics)
        deadline = time.monotonic() + timeout_s
        writers = []
        for run in (r for r in children if r.info.status == "RUNNING"):
            writer = self.tracking.writer().attach(run.info.run_id)
            ended_well, metrics = outcomes.get(run.data.tags.get(TRIAL_TAG), (False, {}))
            if stopped:
                writer.end_run("KILLED")
            elif ended_well:
                if not metrics.get("completed"):
                    epoch = metrics.get(EPOCH)
                    at = str(int(epoch)) if isinstance(epoch, int | float) else "unknown"
                    writer.set_tags({"stopped_early": "true", "stopped_at_epoch": at})
                writer.end_run("FINISHED")
            else:
                writer.end_run("FAILED")
            writers.append(writer)
        for writer in writers:
            writer.close(max(0.0, deadline - time.monotonic()))

    def _tag_checkpoints(self, children: list[Any], results: list[Any]) -> None:
        """Tag every trial run with ``checkpoint``: its final checkpoint's durable URI
        (:func:`checkpoint_uri`), matched by the trial id each run carries."""
        by_trial = {}
        for result in results:
            uri, trial_id = checkpoint_uri(result), (result.metrics or {}).get("trial_id")
            if uri is not None and trial_id is not None:
                by_trial[trial_id] = uri
        client = self.tracking.client()
        try:
            for run in children:
                uri = by_trial.get(run.data.tags.get(TRIAL_TAG))
                if uri is not None:
                    client.set_tag(run.info.run_id, "checkpoint", uri)
        except Exception as err:  # noqa: BLE001 - the store's trouble costs the tags only
            logger.warning(
                "tracking store %s: checkpoint tags not set: %s",
                self.tracking.shown_uri,
                reason(err),
            )

    def _summarize(self, results: list[Any], children: list[Any]) -> None:
        """The sweep's trial counts, best evaluation (the chosen run's: see the module
        docstring) and code version."""
        failed = sum(r.error is not None for r in results)
        costs = [(r.metrics or {}).get(EVAL_COST) for r in results]
        if self.best.run_id is not None:
            chosen = [r for r in children if r.info.run_id == self.best.run_id]
            costs = [r.data.metrics.get(EVAL_COST) for r in chosen]
        costs = [c for c in costs if isinstance(c, int | float)]
        self.parent.log_metrics(
            {TRIALS: len(results), TRIALS_FINISHED: len(results) - failed, TRIALS_FAILED: failed}
            | ({BEST_EVAL_COST: min(costs)} if costs and self.best.single else {})
        )
        self.parent.set_tag("git_commit", git_commit() or "unknown")
        if self.best.single and self.best.run_id is not None:  # a search's, registered or not
            self.parent.set_tag("best_run", self.best.run_id)

    def _describe(self, description: str | None, model: str | None) -> None:
        """The parent run's description: ``description``, then links (MLflow shows tags as
        plain text; the description is Markdown) to the best (or registered) run and model."""
        lines = [description] if description else []
        run_id = self.best.run_id if self.best.single else None
        run_id = run_id or self._registered_run
        try:
            page = f"#/experiments/{self.tracking.experiment_id()}/runs"
        except Exception:  # noqa: BLE001 - the store's trouble costs the links only
            page = None
        if run_id and page:
            named = "best run" if self.best.single else f"registered run ({self.best.why})"
            lines.append(f"The {named}: [{run_id}]({page}/{run_id}).")
        if model:
            name, _, version = model.partition("/")
            lines.append(f"Registered as [{model}](#/models/{name}/versions/{version}).")
        if lines:
            self.parent.set_tag(NOTE_TAG, "\n\n".join(lines))

    def register_best(self, name: str) -> str | None:
        """Register the best trial (:attr:`best`'s run, else the lowest ``eval_cost`` of the
        FINISHED trial runs; with a checkpoint) as ``name``: ``NAME/VERSION``, or None when no
        trial qualifies. A store or a checkpoint that fails costs the registration, with a
        warning, never the sweep."""
        try:
            runs = [
                r
                for r in self.tracking.child_runs(self.parent.run_id)
                if r.info.status == "FINISHED"
                and (EVAL_COST in r.data.metrics or r.info.run_id == self.best.run_id)
                and r.data.tags.get("checkpoint")
                and self.best.run_id in (None, r.info.run_id)
            ]
            if not runs:
                return None
            best = min(runs, key=lambda r: r.data.metrics.get(EVAL_COST, float("inf")))
            tags = {"chosen": self.best.why}
            version = register_run(self.tracking, best.info.run_id, name, tags)
        except Exception as err:  # noqa: BLE001 - a registry failure must not fail a sweep
            logger.warning(
                "sweep %s: its best policy was not registered as %s (%s); register it with: "
                "linc-report register --tracking-uri %s --run RUN_ID --name %s",
                self.name,
                name,
                " ".join(str(err).split())[:500],  # a refused checkpoint names two paths
                self.tracking.shown_uri,
                name,
            )
            return None
        model = f"{name}/{version}"
        run_tag = "best_run" if self.best.single else "registered_run"
        self._registered_run = best.info.run_id
        self.parent.set_tags({"registered_model": model, run_tag: best.info.run_id})
        return model


def _recorded_run(
    tracking: TrackingTarget, recorded: dict[str, Any], folder: str, name: str, params: dict
) -> str | None:
    """The recorded parent run's id, when it is sweep ``name``'s here (see the module
    docstring): in this experiment, tagged as this sweep's parent run.

    Raises:
        SweepRefused: ``params`` (this run's) change a setting the run logged: resumed so, the
            sweep would return its finished trials' results as this run's.
    """
    from mlflow.exceptions import MlflowException

    uri = recorded.get("tracking_uri")
    shown = None if uri is None else redact(str(uri))
    same = shown in (None, tracking.shown_uri) and recorded.get("experiment_path") in (None, folder)
    if not same and shown == tracking.shown_uri:
        return None  # a copy of the folder, pointed at the original's store
    experiment_id = tracking.experiment_id()  # first: a moved store's is re-pointed here
    try:
        run = tracking.client().get_run(str(recorded["parent_run_id"]))
    except (MlflowException, KeyError):
        return None
    tags = run.data.tags
    if (run.info.experiment_id, tags.get("kind"), tags.get("sweep")) != (
        experiment_id,
        "sweep",
        name,
    ):
        # the record is the folder's, and anyone who writes the folder writes it
        logger.warning("the recorded parent run %s is not sweep %s's run", run.info.run_id, name)
        return None
    if changed := changed_settings(run.data.params, params):
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise SweepRefused(
            f"{name}: this run has {', '.join(changed[:3])}{more}, unlike the sweep saved in "
            f"{folder}: re-run with its settings to resume it, or give this run another name"
        )
    return run.info.run_id


__all__ = ["NOTE_TAG", "BestChoice", "SweepRuns"]
