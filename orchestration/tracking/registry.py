"""The model registry: a trial's policy logged as an MLflow pyfunc model and registered.

At the end of a sweep with ``tracking.register: NAME`` the best trial (the lowest
``eval_cost`` among its finished trials) is registered (:func:`register_best`), and
``linc-report register --run ID`` registers any trial run (:func:`register_run`). The model is
:mod:`orchestration.tracking.policy_model` with the trial's final checkpoint as its artifact
and ``linc_core`` as its code, so that

    model = mlflow.pyfunc.load_model("models:/NAME/VERSION")
    model.predict(pandas.DataFrame({"instance": [open("C101.txt").read()]}), params={...})

returns verified routes, and ``mlflow models serve -m models:/NAME/VERSION --env-manager local
-h 127.0.0.1`` answers a POST of an instance. The version is tagged with the sweep, variant,
seed, trial run and evaluation.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import linc_core
from linc_core.train.checkpoint import CHECKPOINT_NAME, copy_checkpoint, manifest_path
from orchestration.data.storage import open_filesystem
from orchestration.tracking.store import follow_moved_store
from orchestration.tracking.target import TrackingTarget

logger = logging.getLogger(__name__)

MODEL_NAME = "policy"  # the logged model's name under its run
POLICY_MODEL_CODE = Path(__file__).with_name("policy_model.py")


def signature() -> Any:
    """Inputs (an instance's file text, or its arrays), outputs, and the decoding params."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, ParamSchema, ParamSpec, Schema

    vector, matrix = Array("double"), Array(Array("double"))
    inputs = Schema(
        [
            ColSpec("string", "instance", required=False),
            ColSpec("string", "name", required=False),
            ColSpec(matrix, "locs", required=False),
            ColSpec(vector, "demand", required=False),
            ColSpec("double", "capacity", required=False),
            ColSpec(matrix, "time_windows", required=False),
            ColSpec(vector, "service_time", required=False),
        ]
    )
    outputs = Schema(
        [
            ColSpec("string", "name"),
            ColSpec("double", "cost"),
            ColSpec("boolean", "feasible"),
            ColSpec("string", "violations"),
            ColSpec("string", "routes"),
            ColSpec("long", "num_routes"),
            ColSpec("double", "seconds"),
        ]
    )
    params = ParamSchema(
        [
            ParamSpec("method", "string", "sampling"),
            ParamSpec("num_z", "long", 128),
            ParamSpec("augment", "long", 8),
            ParamSpec("seed", "long", 0),
        ]
    )
    return ModelSignature(inputs=inputs, outputs=outputs, params=params)


@contextmanager
def _store(tracking_uri: str) -> Iterator[None]:
    """MLflow's fluent API pointed at ``tracking_uri`` (its environment variable restored)."""
    import mlflow

    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before
        mlflow.set_tracking_uri(before or "")


def _local_checkpoint(uri: str, folder: Path) -> Path:
    """The checkpoint (and its manifest) at ``uri`` (a path or ``s3://...``) in ``folder``."""
    target = folder / CHECKPOINT_NAME
    if "://" not in uri:
        return copy_checkpoint(uri, target)
    filesystem, path = open_filesystem(uri)
    for source, destination in ((path, target), (str(manifest_path(path)), manifest_path(target))):
        with filesystem.open_input_stream(source) as stream:
            destination.write_bytes(stream.read())
    return target


def register_run(
    tracking: TrackingTarget, run_id: str, name: str, tags: dict[str, str] | None = None
) -> str:
    """Log trial run ``run_id``'s final checkpoint (its ``checkpoint`` tag) as a pyfunc model
    on that run and register it as ``name``; returns the new version.

    Raises:
        LookupError: the run has no ``checkpoint`` tag, which linc's sweep driver puts on each
            trial run when the sweep ends (the message says what to do).
    """
    import mlflow

    client = tracking.client()
    run = client.get_run(run_id)
    checkpoint = run.data.tags.get("checkpoint")
    if not checkpoint:
        sweep = run.data.tags.get("sweep")
        why = (
            f"its sweep {sweep!r} has not ended (the driver tags each trial's final checkpoint "
            "when the sweep ends): run the sweep's command again, it resumes and ends it"
            if sweep and run.data.tags.get("variant")
            else "not a linc trial run (a child run of a linc sweep)"
        )
        raise LookupError(f"run {run_id} ({run.info.status}) has no 'checkpoint' tag: {why}")
    experiment = client.get_experiment(run.info.experiment_id)
    if follow_moved_store(tracking.uri, experiment.experiment_id, experiment.artifact_location):
        run = client.get_run(run_id)  # its artifact folder is now beside the moved store
    described = {
        "variant": run.data.tags.get("variant", ""),
        "seed": run.data.tags.get("seed", ""),
        "sweep": run.data.tags.get("sweep", ""),
        "trial_run": run_id,
        "checkpoint": checkpoint,
    }
    for metric in ("eval_cost", "eval_infeasible", "validation_cost"):
        if metric in run.data.metrics:
            described[metric] = f"{run.data.metrics[metric]:.4f}"
    with tempfile.TemporaryDirectory(prefix="linc-register-") as folder:
        path = _local_checkpoint(checkpoint, Path(folder))
        with _store(tracking.uri), mlflow.start_run(run_id=run_id), warnings.catch_warnings():
            # the signature is given; MLflow's notes about type hints and an input example
            # (it would run the policy while logging) are not the user's business
            warnings.simplefilter("ignore", UserWarning)
            info = mlflow.pyfunc.log_model(
                name=MODEL_NAME,
                python_model=str(POLICY_MODEL_CODE),
                artifacts={"checkpoint": str(path)},
                code_paths=[str(Path(linc_core.__file__).parent)],
                signature=signature(),
                registered_model_name=name,
                pip_requirements=_requirements(),
            )
    version = str(info.registered_model_version)
    for key, value in (described | (tags or {})).items():
        client.set_model_version_tag(name, version, key, value)
    return version


def register_best(
    tracking: TrackingTarget, parent_run_id: str, name: str, sweep: str
) -> tuple[str, str] | None:
    """Register the sweep's best trial (lowest ``eval_cost`` of its FINISHED trial runs with a
    checkpoint) as ``name``: (trial run id, version), or None when no trial qualifies. A store
    that fails costs the registration, with a warning, never the sweep."""
    try:
        runs = [
            r
            for r in tracking.child_runs(parent_run_id)
            if r.info.status == "FINISHED"
            and "eval_cost" in r.data.metrics
            and r.data.tags.get("checkpoint")
        ]
        if not runs:
            return None
        best = min(runs, key=lambda r: r.data.metrics["eval_cost"])
        version = register_run(tracking, best.info.run_id, name, {"chosen": "lowest eval_cost"})
    except Exception as err:  # noqa: BLE001 - a registry failure must not fail a sweep
        reason = " ".join(str(err).split())[:200]
        logger.warning(
            "sweep %s: its best policy was not registered as %s (%s); register it with: "
            "linc-report register --tracking-uri %s --run RUN_ID --name %s",
            sweep,
            name,
            reason,
            tracking.uri,
            name,
        )
        return None
    return best.info.run_id, version


def _requirements() -> list[str]:
    """What the model needs besides its code (for a server that builds its own environment)."""
    from importlib.metadata import version

    return [
        f"{package}=={version(package)}"
        for package in ("torch", "numpy", "pyarrow", "vrplib", "pandas")
    ]


__all__ = ["MODEL_NAME", "register_best", "register_run", "signature"]
