"""The model registry: a trial's policy logged as an MLflow pyfunc model and registered.

At the end of a sweep with ``tracking.register: NAME`` the best trial (the lowest
``eval_cost`` among its finished trials) is registered
(:meth:`~orchestration.tracking.runs.SweepRuns.register_best`), and
``linc-report register --run ID`` registers any trial run (:func:`register_run`). The model is
:mod:`orchestration.tracking.policy_model` with the trial's final checkpoint as its artifact
and ``linc_core`` as its code, so that

    model = mlflow.pyfunc.load_model("models:/NAME/VERSION")
    model.predict(pandas.DataFrame({"instance": [open("C101.txt").read()]}), params={...})

returns verified routes, and ``mlflow models serve -m models:/NAME/VERSION --env-manager local
-h 127.0.0.1`` answers a POST of an instance. The version is tagged with the sweep, variant,
seed, trial run and evaluation, and says how to use it where the registry's page shows it: its
description (:func:`usage`: these calls, the serving command, the decoding params with their
defaults) and its input example (a ten-customer instance of the policy's problem, as arrays,
with a small decoding budget; MLflow checks it by running the policy once while logging).

A run's ``checkpoint`` tag is a tag: whoever can write to the store can point it anywhere. A
checkpoint is registered only when it lies under its sweep's own storage (the
``resources.storage`` param the sweep driver logged on the trial's parent run: params, unlike
tags, cannot be changed once logged), compared by scheme, bucket and normalised path (``..``
resolved, symlinks followed, userinfo and query ignored, so a masked password does not matter);
when it has a manifest it matches; and when it reads as a linc checkpoint of tensors and plain
data (:func:`~linc_core.train.checkpoint.load_checkpoint`). The copy so checked is the one
logged. Anything else is refused with one :class:`CheckpointError` line, and nothing is logged.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import linc_core
from linc_core.metrics import EVAL_COST, EVAL_INFEASIBLE, VALIDATION_COST
from linc_core.train.checkpoint import (
    CHECKPOINT_NAME,
    CheckpointError,
    copy_checkpoint,
    load_checkpoint,
    manifest_path,
    read_manifest,
)
from orchestration.data.storage import open_filesystem
from orchestration.tracking.store import PARENT_RUN_TAG, follow_moved_store
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import QUIET_RUN_LINKS

MODEL_NAME = "policy"  # the logged model's name under its run
STORAGE_PARAM = "resources.storage"  # the sweep's Tune storage, on its parent run
POLICY_MODEL_CODE = Path(__file__).with_name("policy_model.py")
PROGRESS_BAR_VARIABLE = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


EXAMPLE_PARAMS = {"method": "sampling", "num_z": 8, "augment": 1, "seed": 0}


def input_example(problem: str) -> Any:
    """(a one-row frame: a seeded ten-customer ``problem`` instance as arrays, its decoding
    params): the model version's input example."""
    import pandas as pd

    from linc_core.problems.spec import problem_spec
    from linc_core.train.data import generate

    instance = generate(problem, 1, 10, seed=0)  # CVRP's generator knows 10, not 5
    row: dict[str, Any] = {"name": f"example-{problem}"}
    for field in ("locs", "demand", "capacity", "time_windows", "service_time"):
        if field in problem_spec(problem).instance_fields:
            value = getattr(instance, field)[0]
            row[field] = float(value) if field == "capacity" else value.tolist()
    return pd.DataFrame([row]), dict(EXAMPLE_PARAMS)


def usage(name: str, version: str, described: dict[str, str]) -> str:
    """The model version's description (Markdown): what it is, the three lines that load and
    call it, the serving command, the decoding params and their defaults."""
    model = f"models:/{name}/{version}"
    params = signature().params
    rows = "\n".join(f"| `{p.name}` | {p.dtype.name} | `{p.default}` |" for p in params)
    what = ", ".join(f"{k} {v}" for k, v in described.items() if k != "checkpoint" and v)
    return f"""linc policy ({what}).

Load it and solve an instance (a Solomon, TSPLIB or CVRPLIB file's text, or arrays as in the
input example):

```python
import mlflow, pandas
model = mlflow.pyfunc.load_model("{model}")
model.predict(pandas.DataFrame({{"instance": [open("C101.txt").read()]}}), params={{"num_z": 128}})
```

Serve it (then POST `{{"dataframe_records": [{{"instance": "..."}}], "params": {{...}}}}` to
`http://127.0.0.1:5001/invocations`):

```bash
mlflow models serve -m {model} --env-manager local -h 127.0.0.1 -p 5001
```

Decoding params (`method`: sampling, greedy, multistart or sgbs; `augment`: 1 or 8):

| param | type | default |
|---|---|---:|
{rows}
"""


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
            ColSpec("double", "cost", required=False),  # null: no feasible route found
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
    """MLflow's fluent API pointed at ``tracking_uri`` (its environment variable restored), with
    MLflow's own console lines off meanwhile: registering prints "Successfully registered model",
    "Created version" and a "Downloading artifacts" progress bar on stderr, which the sweep's
    console promises to keep out (the sweep and ``linc-report register`` print their own line)."""
    import mlflow
    from mlflow.utils.logging_utils import MLFLOW_LOGGING_STREAM

    os.environ.update(QUIET_RUN_LINKS)  # its run's end prints no "View run ... at URL"
    before = os.environ.get("MLFLOW_TRACKING_URI")
    bar_before = os.environ.get(PROGRESS_BAR_VARIABLE)
    stream_before = MLFLOW_LOGGING_STREAM.enabled
    mlflow.set_tracking_uri(tracking_uri)
    os.environ[PROGRESS_BAR_VARIABLE] = "false"
    MLFLOW_LOGGING_STREAM.enabled = False  # MLflow's eprint and INFO lines; errors still raise
    try:
        yield
    finally:
        MLFLOW_LOGGING_STREAM.enabled = stream_before
        if bar_before is None:
            os.environ.pop(PROGRESS_BAR_VARIABLE, None)
        else:
            os.environ[PROGRESS_BAR_VARIABLE] = bar_before
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before
        mlflow.set_tracking_uri(before or "")


def _local_checkpoint(uri: str, folder: Path) -> Path:
    """The checkpoint (and its manifest, when it has one) at ``uri`` (a path or ``s3://...``)
    in ``folder``."""
    target = folder / CHECKPOINT_NAME
    if "://" not in uri:
        return copy_checkpoint(uri, target)
    filesystem, path = open_filesystem(uri)
    with filesystem.open_input_stream(path) as stream:
        target.write_bytes(stream.read())
    try:
        with filesystem.open_input_stream(str(manifest_path(path))) as stream:
            manifest_path(target).write_bytes(stream.read())
    except FileNotFoundError:
        pass  # refused by the caller, which names it
    return target


def _place(uri: str) -> tuple[str, str]:
    """(scheme and bucket, normalised absolute path) of a local path or a URI: ``..``
    resolved, local symlinks followed, userinfo and query left out."""
    if "://" not in uri or uri.startswith("file://"):
        local = uri.removeprefix("file://")
        return "file", os.path.realpath(os.path.expanduser(local))
    parts = urlsplit(uri)
    bucket = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{bucket}", posixpath.normpath("/" + parts.path.lstrip("/"))


def checkpoint_in_storage(checkpoint: str, storage: str) -> str:
    """``checkpoint`` (a path or URI) normalised (see :func:`_place`), when it lies under the
    folder or URI ``storage``.

    Raises:
        CheckpointError: it lies elsewhere (another bucket or scheme, or a ``..`` leading out).
    """
    where, path = _place(checkpoint)
    root_where, root = _place(storage)
    if where != root_where or not path.startswith(root.rstrip("/") + "/"):
        raise CheckpointError(
            f"checkpoint {checkpoint}: outside its sweep's storage {storage}; refused for "
            "registration"
        )
    if where == "file":
        return path
    parts = urlsplit(checkpoint)
    return f"{parts.scheme}://{parts.netloc}{path}" + (f"?{parts.query}" if parts.query else "")


def _sweep_storage(client: Any, run: Any) -> str:
    """The Tune storage of ``run``'s sweep: its parent run's ``resources.storage`` param."""
    run_id = run.info.run_id
    parent_id = run.data.tags.get(PARENT_RUN_TAG)
    parent = client.get_run(parent_id) if parent_id else None
    storage = parent.data.params.get(STORAGE_PARAM) if parent is not None else None
    if not storage:
        raise CheckpointError(
            f"run {run_id}: its parent run records no sweep storage ('{STORAGE_PARAM}'), so its "
            "checkpoint cannot be checked; only trial runs of a linc sweep are registered"
        )
    return storage


def _checked_copy(checkpoint: str, storage: str, folder: Path) -> Path:
    """A local copy of ``checkpoint`` in ``folder`` that lies under ``storage``, matches its
    manifest and reads as a linc checkpoint of tensors and plain data.

    Raises:
        CheckpointError: any of these fails (one line naming the checkpoint).
    """
    source = checkpoint_in_storage(checkpoint, storage)
    try:
        path = _local_checkpoint(source, folder)
    except OSError as err:
        why = err.strerror or " ".join(str(err).split())[:200]
        raise CheckpointError(f"checkpoint {checkpoint}: cannot be read ({why})") from None
    if read_manifest(path) is None:
        raise CheckpointError(
            f"checkpoint {checkpoint}: no manifest ({manifest_path(checkpoint).name}) beside it; "
            "refused for registration (a checkpoint of linc's sweeps always has one)"
        )
    load_checkpoint(path, name=checkpoint)  # verified against the manifest, read unrun
    return path


def register_run(
    tracking: TrackingTarget, run_id: str, name: str, tags: dict[str, str] | None = None
) -> str:
    """Log trial run ``run_id``'s final checkpoint (its ``checkpoint`` tag) as a pyfunc model
    on that run and register it as ``name``; returns the new version, or the version that
    already holds this run's checkpoint (a re-run registers nothing new; ``tags`` are set on it).

    Raises:
        LookupError: the run has no ``checkpoint`` tag, which linc's sweep driver puts on each
            trial run when the sweep ends (the message says what to do).
        CheckpointError: the checkpoint lies outside its sweep's storage, has no manifest or
            does not match it, or is no linc checkpoint of tensors and plain data (see the
            module docstring); nothing is logged.
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
    for metric in (EVAL_COST, EVAL_INFEASIBLE, VALIDATION_COST):
        if metric in run.data.metrics:
            described[metric] = f"{run.data.metrics[metric]:.4f}"
    existing = registered_version(client, name, run_id, checkpoint)
    if existing is not None:  # a re-run registers nothing new: the same checkpoint, one version
        for key, value in (tags or {}).items():
            client.set_model_version_tag(name, existing, key, value)
        return existing
    problem = run.data.tags.get("problem") or run.data.params.get("data.problem") or "cvrptw"
    with tempfile.TemporaryDirectory(prefix="linc-register-") as folder:
        path = _checked_copy(checkpoint, _sweep_storage(client, run), Path(folder))
        with _store(tracking.uri), mlflow.start_run(run_id=run_id), warnings.catch_warnings():
            # the signature is given; MLflow's notes about type hints are not the user's business
            warnings.simplefilter("ignore", UserWarning)
            warnings.filterwarnings("ignore", module="mlflow.models.utils")  # pandas' future
            info = mlflow.pyfunc.log_model(
                name=MODEL_NAME,
                python_model=str(POLICY_MODEL_CODE),
                artifacts={"checkpoint": str(path)},
                code_paths=[str(Path(linc_core.__file__).parent)],
                signature=signature(),
                input_example=input_example(problem),
                registered_model_name=name,
                pip_requirements=_requirements(),
            )
    version = str(info.registered_model_version)
    for key, value in (described | (tags or {})).items():
        client.set_model_version_tag(name, version, key, value)
    client.update_model_version(name, version, description=usage(name, version, described))
    return version


def registered_version(client: Any, name: str, run_id: str, checkpoint: str) -> str | None:
    """The version of ``name`` already holding run ``run_id``'s ``checkpoint`` (the newest if
    several), else None. A resumed sweep that ended on a later checkpoint gets a new version."""
    versions = [
        v
        for v in client.search_model_versions(f"run_id='{run_id}'")
        if v.name == name and v.status == "READY" and v.tags.get("checkpoint") == checkpoint
    ]
    newest = max((int(v.version) for v in versions), default=None)
    return None if newest is None else str(newest)


def _requirements() -> list[str]:
    """What the model needs besides its code (for a server that builds its own environment)."""
    from importlib.metadata import version

    return [
        f"{package}=={version(package)}"
        for package in ("torch", "numpy", "pyarrow", "vrplib", "pandas")
    ]


__all__ = [
    "EXAMPLE_PARAMS",
    "MODEL_NAME",
    "checkpoint_in_storage",
    "input_example",
    "register_run",
    "registered_version",
    "signature",
    "usage",
]
