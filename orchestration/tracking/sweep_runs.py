"""A sweep's MLflow runs seen from the driver: the parent run, what a re-run follows, the finish.

Each sweep keeps a record ``linc_sweep.json`` beside Tune's state (local folder or S3): the
parent run's id, the tracking store (its URI masked: ``postgresql://linc:***@db/mlflow``, and
compared masked) and the experiment folder it was written for. A re-run of
the same command re-opens that parent run only where it belongs:

* the same store and the same folder: an interrupted sweep resumed, the same parent run;
* another store that holds the recorded run (the store was moved with the folder: the default
  SQLite file lives in the storage folder): the same run, in its new place;
* otherwise (a copied folder with the original's store, a changed ``tracking.uri``): a new parent
  run in the current store, with a warning; the restored trials follow (their runs are found by
  parent and trial id, so they too start anew in the current store and re-log their history from
  their checkpoints). Nothing is written into the store or runs the record names.

At the end :func:`finish_sweep` replays what trials could not deliver (the journals in their
final checkpoints), marks every trial run still RUNNING as KILLED (the sweep was stopped) or
FAILED (its trial failed), and sets the parent's final status, whatever the store does: every
write goes through a :class:`~orchestration.tracking.writer.RunWriter`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from linc_core.metrics import (
    BEST_EVAL_COST,
    EPOCH,
    EVAL_COST,
    TRIALS,
    TRIALS_FAILED,
    TRIALS_FINISHED,
)
from linc_core.train.checkpoint import CHECKPOINT_NAME, git_commit
from linc_core.utils.atomic import write_atomic
from linc_core.utils.secrets import redact
from orchestration.tracking.records import reason
from orchestration.tracking.registry import register_best
from orchestration.tracking.store import TRIAL_TAG
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import JOURNAL_FILE, RunWriter

logger = logging.getLogger(__name__)

SWEEP_FILE = "linc_sweep.json"
NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)


@dataclass(frozen=True)
class SweepRecord:
    """What ``linc_sweep.json`` holds (``tracking_uri`` and ``experiment_path`` are None in
    records written by an older linc, which are taken as written for the current ones)."""

    parent_run_id: str
    name: str
    tracking_uri: str | None = None
    experiment_path: str | None = None


def read_record(filesystem: pafs.FileSystem, experiment_path: str) -> SweepRecord | None:
    try:
        with filesystem.open_input_stream(f"{experiment_path}/{SWEEP_FILE}") as stream:
            values = json.loads(stream.read())
        return SweepRecord(**values)
    except (OSError, ValueError, TypeError):
        return None


def write_record(filesystem: pafs.FileSystem, experiment_path: str, record: SweepRecord) -> None:
    filesystem.create_dir(experiment_path, recursive=True)
    content = json.dumps(record.__dict__).encode()
    write_atomic(f"{experiment_path}/{SWEEP_FILE}", content, filesystem=filesystem)


def open_parent_run(
    tracking: TrackingTarget,
    sweep: dict[str, Any],
    params: dict[str, str],
    filesystem: pafs.FileSystem,
    experiment_path: str,
    resume: bool,
) -> RunWriter:
    """The writer of the sweep's parent run: re-opened or new (see the module docstring); a new
    one gets ``params`` (the sweep's base trial's settings and what the sweep varies).

    Raises:
        MlflowException, OSError: the store does not answer (the driver has not started Ray).
    """
    from mlflow.exceptions import MlflowException

    uri, path = tracking.shown_uri, experiment_path  # a record holds the masked URI
    client = tracking.client()
    # first: a moved store's experiment is re-pointed to its new folder before anything logs
    experiment_id = tracking.experiment_id()
    record = read_record(filesystem, experiment_path) if resume else None
    if record is not None:
        recorded = None if record.tracking_uri is None else redact(record.tracking_uri)
        same = recorded in (None, uri) and record.experiment_path in (None, path)
        found = None
        if same or recorded != uri:
            try:
                found = client.get_run(record.parent_run_id)
            except MlflowException:
                found = None
        if found is not None:
            # RUNNING again once Tune has restored the sweep (run_experiment): a sweep that
            # cannot be restored keeps the status it had
            writer = tracking.writer().attach(record.parent_run_id)
            write_record(filesystem, experiment_path, _record(found.info.run_id, sweep, uri, path))
            return writer
        logger.warning(
            "sweep %s was recorded for store %s at %s; this run uses store %s at %s: "
            "continuing with a new parent run there (the recorded runs are left as they are)",
            sweep["name"],
            recorded,
            record.experiment_path,
            uri,
            experiment_path,
        )
    name = sweep["name"]
    run = client.create_run(experiment_id, run_name=name, tags={"sweep": name, "kind": "sweep"})
    writer = tracking.writer().attach(run.info.run_id)
    writer.log_params(params)
    write_record(filesystem, experiment_path, _record(run.info.run_id, sweep, uri, path))
    return writer


def _record(run_id: str, sweep: dict[str, Any], uri: str, experiment_path: str) -> SweepRecord:
    return SweepRecord(run_id, sweep["name"], uri, experiment_path)


def finish_sweep(
    tracking: TrackingTarget,
    parent: RunWriter,
    results: Any,
    *,
    stopped: bool,
    failed: bool,
    flush_timeout_s: float,
    report: Callable[[], None] | None = None,
    register: str | None = None,
    description: str | None = None,
) -> str | None:
    """Replay the trials' leftover journals, settle every trial run still RUNNING (from its
    trial's Tune result: :func:`_settle_children`), register the best trial's policy as
    ``register`` (unless the sweep was stopped), tag each
    trial run with its final checkpoint, run ``report`` (the trial runs are complete by then),
    and set the parent run's status (KILLED when ``stopped``, else FAILED when ``failed``, else
    FINISHED), then flush. The parent run also gets the sweep's summary: its trial counts and
    best ``eval_cost`` as metrics, the git commit as a tag and ``description`` (Markdown, which
    the MLflow UI shows as the run's description). Returns the registered model as
    ``NAME/VERSION`` (None: none)."""
    for result in results or ():
        _replay_journal(result, tracking, flush_timeout_s)
    status = "KILLED" if stopped else "FAILED" if failed else "FINISHED"
    _settle_children(tracking, parent, results, stopped, flush_timeout_s)
    _tag_final_checkpoints(tracking, parent, results)
    if report is not None:
        report()
    _summarize(parent, results, description)
    model = None
    if register and not stopped:
        registered = register_best(tracking, parent.run_id, register, tracking.sweep or "")
        if registered is not None:
            trial_run, version = registered
            model = f"{register}/{version}"
            parent.set_tags({"registered_model": model, "best_run": trial_run})
    parent.set_status(status)
    parent.close(flush_timeout_s)
    return model


def _summarize(parent: RunWriter, results: Any, description: str | None) -> None:
    """The sweep's trial counts, best evaluation, code version and description on its run."""
    results = list(results or ())
    failed = sum(r.error is not None for r in results)
    costs = [(r.metrics or {}).get(EVAL_COST) for r in results]
    costs = [c for c in costs if isinstance(c, int | float)]
    parent.log_metrics(
        {TRIALS: len(results), TRIALS_FINISHED: len(results) - failed, TRIALS_FAILED: failed}
        | ({BEST_EVAL_COST: min(costs)} if costs else {})
    )
    parent.set_tag("git_commit", git_commit() or "unknown")
    if description:
        parent.set_tag(NOTE_TAG, description)


def _replay_journal(result: Any, tracking: TrackingTarget, timeout: float) -> None:
    """Deliver what a finished trial's final checkpoint says its run never received."""
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None:
        return
    try:  # the journal alone first: most trials delivered everything themselves
        with checkpoint.filesystem.open_input_stream(f"{checkpoint.path}/{JOURNAL_FILE}") as f:
            if not json.loads(f.read()).get("pending"):
                return
        with checkpoint.as_directory() as folder:  # with the artifact files it names
            writer = tracking.writer()
            writer.restore(folder)
    except (OSError, ValueError) as err:
        if not isinstance(err, FileNotFoundError):
            logger.warning("could not read the tracking journal of %s: %s", checkpoint.path, err)
        return
    writer.close(timeout)


def checkpoint_uri(result: Any) -> str | None:
    """Where a Tune result's final checkpoint file lives for good: a local path (what
    ``linc-eval --checkpoint`` reads) or ``s3://bucket/...`` (None: no checkpoint)."""
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None:
        return None
    path = f"{checkpoint.path}/{CHECKPOINT_NAME}"
    scheme = getattr(checkpoint.filesystem, "type_name", "local")
    return path if scheme == "local" else f"{scheme}://{path}"


def _tag_final_checkpoints(tracking: TrackingTarget, parent: RunWriter, results: Any) -> None:
    """Tag every trial run under ``parent`` with ``checkpoint``: its final checkpoint's durable
    URI (:func:`checkpoint_uri`), matched by the trial id each run carries."""
    from mlflow.exceptions import MlflowException

    by_trial = {}
    for result in results or ():
        uri = checkpoint_uri(result)
        trial_id = (result.metrics or {}).get("trial_id")
        if uri is not None and trial_id is not None:
            by_trial[trial_id] = uri
    if not by_trial:
        return
    client = tracking.client()
    try:
        for run in tracking.child_runs(parent.run_id):
            uri = by_trial.get(run.data.tags.get(TRIAL_TAG))
            if uri is not None:
                client.set_tag(run.info.run_id, "checkpoint", uri)
    except (MlflowException, OSError) as err:
        logger.warning(
            "tracking store %s: checkpoint tags not set: %s", tracking.shown_uri, reason(err)
        )


def _settle_children(
    tracking: TrackingTarget, parent: RunWriter, results: Any, stopped: bool, timeout: float
) -> None:
    """Every run under ``parent`` still RUNNING (its trial ended without saying how) gets its
    status from the trial's Tune result: KILLED when the sweep was stopped; else FINISHED when
    the trial ended without an error, tagged ``stopped_early`` and ``stopped_at_epoch`` when
    it had not completed (its scheduler stopped it); else FAILED (an error, or its process
    lost)."""
    from mlflow.exceptions import MlflowException

    try:
        running = tracking.child_runs(parent.run_id, running_only=True)
    except (MlflowException, OSError) as err:
        logger.warning(
            "tracking store %s: could not list the sweep's trial runs to settle them: %s",
            tracking.shown_uri,
            reason(err),
        )
        return
    outcomes = {}
    for result in results or ():
        metrics = result.metrics or {}
        if metrics.get("trial_id") is not None:
            outcomes[metrics["trial_id"]] = (result.error is None, metrics)
    deadline = time.monotonic() + timeout
    writers = []
    for run in running:
        writer = tracking.writer().attach(run.info.run_id)
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


__all__ = [
    "SWEEP_FILE",
    "SweepRecord",
    "checkpoint_uri",
    "finish_sweep",
    "open_parent_run",
    "read_record",
]
