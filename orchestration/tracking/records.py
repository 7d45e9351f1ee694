"""What one record of a :class:`~orchestration.tracking.writer.RunWriter` does to the MLflow store.

Each function makes the store calls for one record (or one batch of metric records) and lets the
store's errors through: the writer decides with :func:`is_permanent` whether to retry or drop.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from linc_core.utils.secrets import redact
from orchestration.data.storage import is_out_of_space

logger = logging.getLogger(__name__)

# Errors that repeating the same record cannot fix.
PERMANENT_ERRORS = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_DOES_NOT_EXIST",
        "RESOURCE_ALREADY_EXISTS",
        "INVALID_STATE",
        "BAD_REQUEST",
    }
)
MAX_METRICS_PER_REQUEST = 1000


def find_or_create_run(client: Any, create: dict[str, Any] | None) -> tuple[str, bool]:
    """(run id, whether it existed): the experiment's run with the ``key`` tags, else a new one."""
    from orchestration.tracking.store import ensure_experiment

    assert create is not None
    experiment_id = ensure_experiment(client.tracking_uri, create["experiment"])
    condition = " and ".join(f"tags.`{k}` = '{v}'" for k, v in create["key"].items())
    found = client.search_runs([experiment_id], filter_string=condition, max_results=1)
    if found:
        return found[0].info.run_id, True
    run = client.create_run(experiment_id, run_name=create["run_name"], tags=create["tags"])
    return run.info.run_id, False


def send(
    client: Any, run_id: str, batch: list[dict[str, Any]], spool: Path, known: set[tuple[str, int]]
) -> None:
    from mlflow.entities import Metric, Param, RunTag

    first = batch[0]
    if first["op"] == "metrics":
        metrics = [
            Metric(key, value, record["timestamp"], record["step"])
            for record in batch
            for key, value in record["values"].items()
            if (key, record["step"]) not in known
        ]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
        known.update((m.key, m.step) for m in metrics)
    elif first["op"] == "params":
        params = [Param(k, v) for k, v in first["values"].items()]
        client.log_batch(run_id, params=params)
    elif first["op"] == "tags":
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in first["values"].items()])
    elif first["op"] == "artifact":
        # the artifact keeps its own name, not the spool's unique one
        with tempfile.TemporaryDirectory(prefix="linc-artifact-") as folder:
            local = Path(folder) / first["name"]
            shutil.copyfile(spool / first["file"], local)
            client.log_artifact(run_id, str(local), first["path"])
        (spool / first["file"]).unlink(missing_ok=True)
    elif first["op"] == "status":
        if first["status"] == "RUNNING":
            client.update_run(run_id, status="RUNNING")
        else:
            client.set_terminated(run_id, status=first["status"])


def next_batch(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first pending record, with the metric records right after it when it is one (up to
    one request's worth)."""
    first = pending[0]
    if first["op"] != "metrics":
        return [first]
    batch, count = [], 0
    for record in pending:
        if record["op"] != "metrics" or count + len(record["values"]) > MAX_METRICS_PER_REQUEST:
            break
        batch.append(record)
        count += len(record["values"])
    return batch or [first]


def is_permanent(err: Exception) -> bool:
    from mlflow.exceptions import MlflowException

    if isinstance(err, MlflowException):
        return err.error_code in PERMANENT_ERRORS
    return not isinstance(err, OSError)  # a bug, not an outage: do not retry it forever


class Outage:
    """A store's current outage, as a run writer sees it: one warning when it begins (naming the
    store, and whether it is out of space) and one when it ends; :meth:`full_for`, the seconds
    it has answered "out of space" without a success in between."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = redact(tracking_uri)
        self.since: float | None = None
        self.full_since: float | None = None

    @property
    def full(self) -> bool:
        return self.full_since is not None

    def full_for(self) -> float:
        return 0.0 if self.full_since is None else time.monotonic() - self.full_since

    def begin(self, err: Exception, pending: int) -> None:
        """A request failed with ``err``; ``pending`` records wait."""
        full = is_out_of_space(err)
        if not full:
            self.full_since = None
        elif self.full_since is None:
            self.full_since = time.monotonic()
        if self.since is None:
            self.since = time.monotonic()
            logger.warning(
                "tracking store %s %s (%s); training continues, %d record(s) kept "
                "and replayed in order when it answers",
                self.tracking_uri,
                "is out of space" if full else "unreachable",
                reason(err),
                pending,
            )

    def end(self) -> None:
        """A request succeeded."""
        self.full_since = None
        if self.since is not None:
            logger.warning(
                "tracking store %s answers again after %.0f s",
                self.tracking_uri,
                time.monotonic() - self.since,
            )
            self.since = None


class StoreErrorTraceback(logging.Filter):
    """MLflow's SQL store logs each failed statement at ERROR with a traceback; a writer names
    each outage in one warning line itself (and retries), so those records are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error")


def quiet_store_tracebacks() -> None:
    store_logger = logging.getLogger("mlflow.store.db.utils")
    if not any(isinstance(f, StoreErrorTraceback) for f in store_logger.filters):
        store_logger.addFilter(StoreErrorTraceback())


def reason(err: Exception) -> str:
    """One line for the console: the error's text, masked, SQLAlchemy's SQL and parameters
    left out."""
    text = " ".join(str(err).split())
    text = re.sub(r" ?\[SQL: .*", "", text)
    return redact(text)[:300]


__all__ = [
    "Outage",
    "MAX_METRICS_PER_REQUEST",
    "PERMANENT_ERRORS",
    "find_or_create_run",
    "is_permanent",
    "quiet_store_tracebacks",
    "next_batch",
    "reason",
    "send",
]
