"""MLflow helpers: the tracking URI, safe parameter flattening, a fit() callback.

MLflow 3.17 keeps the plain ``./mlruns`` file store in maintenance mode, so the local default is a
SQLite database (``sqlite:///ABSOLUTE/PATH/mlflow.db``); :func:`resolve_tracking_uri` is the one
place that picks the store. Parameters are flattened to dotted keys,
values are masked (``linc_core.utils.secrets``) and truncated to MLflow's length limit, and
anything whose key looks like a credential is dropped before it can reach the tracking store.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linc_core.metrics import EPOCH, EVAL_COST, RUNS_TABLE_METRICS, VALIDATION_COST
from linc_core.train.checkpoint import CHECKPOINT_NAME
from linc_core.utils.secrets import redact
from linc_core.utils.typed import ConfigError

# A trial's run is nested under its sweep's parent run (MLflow's own tag) and found again on a
# retry by the Tune trial id it carries.
PARENT_RUN_TAG = "mlflow.parentRunId"
TRIAL_TAG = "linc.trial_id"
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
# Views of the runs table kept on the experiment, as the MLflow UI's "Save view" stores them:
# tag VIEW_TAG_PREFIX + id, its value an envelope {name, createdAt, updatedAt, state} (the
# Views menu lists those; a share link ?viewStateShareKey=ID opens one). The UI leaves
# runsExpanded out of a saved view: a view sorted by a metric lists the trials flat instead
# (MLflow nests child runs only when sorted by start time), their sweep in a column.
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
RUNS_VIEW = "linc-runs"
RUNS_VIEW_TAG = f"{VIEW_TAG_PREFIX}{RUNS_VIEW}"
OPENING_VIEW_TAG = "linc.view"  # the view an experiment opens on: its latest sweep's


def resolve_tracking_uri(uri: str | None = None, storage: str | Path = "runs") -> str:
    """The MLflow tracking store: ``uri`` if given, else ``$MLFLOW_TRACKING_URI``, else
    ``sqlite:///ABS/PATH/mlflow.db`` in the local folder ``storage`` (created if missing).

    Raises:
        ConfigError: no URI is given or set and ``storage`` is remote (``s3://...``), where a
            SQLite file cannot live.
    """
    if uri:
        return uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if "://" in str(storage):
        raise ConfigError(
            f"tracking.uri: required when cluster.storage is remote ({redact(str(storage))!r}); "
            "set it or MLFLOW_TRACKING_URI"
        )
    folder = Path(storage).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def saved_view(name: str, state: dict[str, Any]) -> str:
    """An experiment tag's value for the MLflow UI's Views menu: ``state`` saved as ``name``."""
    now = int(time.time() * 1000)
    envelope = {"name": name, "createdAt": now, "updatedAt": now, "state": json.dumps(state)}
    return json.dumps(envelope)


def _is_saved_view(value: str | None) -> bool:
    try:
        return isinstance(json.loads(value or "").get("state"), str)
    except (ValueError, AttributeError):
        return False


def runs_view_state() -> dict[str, Any]:
    """The runs table linc's experiments open with (the MLflow UI's view state): every trial
    of every sweep, lowest evaluation cost first, with its sweep, variant, seed, search trial
    number and the metrics that compare runs; every run in the charts (the reference and the
    baseline too, not the UI's first ten). :func:`runs_view_url` links to it."""
    columns = [f"tags.`{key}`" for key in ("variant", "seed", "sweep", "optuna.trial_number")]
    columns += [f"metrics.`{key}`" for key in RUNS_TABLE_METRICS]
    columns.append("attributes.`Duration`")
    return {
        "selectedColumns": columns,
        "orderByKey": "metrics.`eval_cost`",
        "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",
    }


def sweep_view(sweep: Mapping[str, Any]) -> tuple[str, str]:
    """(experiment tag, saved view) of the runs table of one sweep (``sweep``: what its parent
    run records: ``name``, ``kind``; a search's ``space``, ``metric`` and ``mode``): its runs
    only; an ablation's variant, seed and metrics, best evaluation first; a search's trial
    number, searched values (their params) and objectives, best first."""
    name = str(sweep["name"])
    state = runs_view_state() | {"searchFilter": f"tags.`sweep` = '{name}'"}
    if sweep.get("kind") == "search":
        metrics = sweep.get("metric") or VALIDATION_COST
        metrics = [metrics] if isinstance(metrics, str) else list(metrics)
        modes = sweep.get("mode") or "min"
        modes = [modes] if isinstance(modes, str) else list(modes)
        params = [key.replace(".overrides.", ".") for key in sweep.get("space") or {}]
        columns = ["tags.`optuna.trial_number`", *(f"params.`{key}`" for key in params)]
        columns += [f"metrics.`{m}`" for m in dict.fromkeys([*metrics, EVAL_COST, EPOCH])]
        state |= {
            "selectedColumns": [*columns, "attributes.`Duration`"],
            "orderByKey": f"metrics.`{metrics[0]}`",
            "orderByAsc": modes[0] == "min",
        }
    return f"{VIEW_TAG_PREFIX}{sweep_view_id(name)}", saved_view(f"{name}: its trials", state)


def save_sweep_view(client: Any, experiment_id: str, sweep: Mapping[str, Any]) -> None:
    """Save :func:`sweep_view` on the experiment, the view it opens on
    (:data:`OPENING_VIEW_TAG`; :mod:`orchestration.tracking.ui_app`)."""
    tag, view = sweep_view(sweep)
    client.set_experiment_tag(experiment_id, tag, view)
    client.set_experiment_tag(experiment_id, OPENING_VIEW_TAG, tag.removeprefix(VIEW_TAG_PREFIX))


def runs_view_url(ui_address: str, experiment_id: str, view: str = RUNS_VIEW) -> str:
    """The MLflow UI page of ``experiment_id`` with saved view ``view`` (default
    :func:`runs_view_state`'s; a sweep's: :func:`sweep_view_id`), in the UI's model-training
    mode (it opens in its GenAI mode otherwise)."""
    page = f"{ui_address.rstrip('/')}/#/experiments/{experiment_id}/runs"
    return f"{page}?workflowType=machine_learning&viewStateShareKey={view}"


def sweep_view_id(name: str) -> str:
    """The id of sweep ``name``'s saved view (:func:`sweep_view`)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", f"sweep-{name}")[:100]


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment's artifacts go: beside a SQLite store, in ``mlartifacts/`` of its
    folder (so the storage folder holds runs and artifacts together, wherever the command ran);
    None for a tracking server, whose ``--default-artifact-root`` decides."""
    if tracking_uri.startswith("sqlite:///"):
        return str(Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlartifacts")
    return None


def follow_moved_store(tracking_uri: str, experiment_id: str, location: str) -> bool:
    """Point a moved SQLite store's experiment back beside it; True if it was moved.

    A SQLite store keeps its experiments' artifact folder as an absolute path. When the storage
    folder (store and ``mlartifacts/`` together) was moved, that path names the old place: new
    runs would write their artifacts there and the moved runs' artifacts would not be found. If
    ``location`` is another folder's ``mlartifacts`` whose store is gone, the experiment and its
    runs are re-pointed to this store's :func:`artifact_location`. A copied folder (the original
    store still there) and any other layout are left as they are.
    """
    expected = artifact_location(tracking_uri)
    old = location.removeprefix("file://")
    if expected is None or old == expected or Path(old).name != "mlartifacts":
        return False
    if (Path(old).parent / "mlflow.db").exists():
        return False
    database = tracking_uri.removeprefix("sqlite:///")
    with sqlite3.connect(database, timeout=30) as connection:
        connection.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
            (expected, int(experiment_id)),
        )
        connection.execute(
            "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
            "WHERE experiment_id = ? AND artifact_uri LIKE ? || '%'",
            (expected, len(location) + 1, int(experiment_id), location),
        )
    return True


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """The id of experiment ``name`` in ``tracking_uri``, creating it (race-safe) if missing,
    with its artifacts at :func:`artifact_location` and MLflow's experiment kind tag (model
    training, so the UI opens on the runs table rather than on traces)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        follow_moved_store(tracking_uri, found.experiment_id, found.artifact_location)
        if not _is_saved_view(found.tags.get(RUNS_VIEW_TAG)):  # an older linc's experiment
            view = saved_view("linc: every trial", runs_view_state())
            client.set_experiment_tag(found.experiment_id, RUNS_VIEW_TAG, view)
        return found.experiment_id
    try:
        return client.create_experiment(
            name,
            artifact_location=artifact_location(tracking_uri),
            tags={
                EXPERIMENT_KIND_TAG: "custom_model_development",
                RUNS_VIEW_TAG: saved_view("linc: every trial", runs_view_state()),
            },
        )
    except MlflowException:  # another process created it in between
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def checkpoint_uri(result: Any) -> str | None:
    """Where a Tune result's final checkpoint file lives for good: a local path (what
    ``linc-eval --checkpoint`` reads) or ``s3://bucket/...`` (None: no checkpoint)."""
    checkpoint = getattr(result, "checkpoint", None)
    if checkpoint is None:
        return None
    path = f"{checkpoint.path}/{CHECKPOINT_NAME}"
    scheme = getattr(checkpoint.filesystem, "type_name", "local")
    return path if scheme == "local" else f"{scheme}://{path}"


__all__ = [
    "checkpoint_uri",
    "EXPERIMENT_KIND_TAG",
    "OPENING_VIEW_TAG",
    "PARENT_RUN_TAG",
    "RUNS_VIEW",
    "RUNS_VIEW_TAG",
    "TRIAL_TAG",
    "artifact_location",
    "ensure_experiment",
    "follow_moved_store",
    "resolve_tracking_uri",
    "runs_view_state",
    "runs_view_url",
    "saved_view",
    "save_sweep_view",
    "sweep_view",
    "sweep_view_id",
]
