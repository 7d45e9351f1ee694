"""The one way linc writes to MLflow: a run writer that never raises into training.

Every param, metric, tag, artifact and status of a trial's run and of a sweep's parent run goes
through a :class:`RunWriter`. A call only appends a record to an in-memory queue (artifacts are
copied into the writer's spool folder first); a background thread delivers the records in order.
When the tracking store does not answer, the thread keeps the records, warns once per outage
(naming the store's address), retries with a capped backoff and replays everything in order
when the store answers again. Training never waits on the store, except at :meth:`flush`.

Exactly once. A metric is identified by (key, step). A writer that joins an existing run (a
retried or resumed trial) first reads the run's metric histories and drops every (key, step)
already there; after any failed delivery it reads them again before re-sending (the store may
have applied a request whose answer was lost). Params, tags, artifacts and statuses are
idempotent. A record the store refuses for good (a changed param, a deleted run) is dropped
with a warning, so one bad record never blocks the rest.

Durable. :meth:`save` writes the undelivered records (and their artifact files) into a folder,
the trial's checkpoint, which Tune persists to the trial's storage; :meth:`restore` takes them
back on the next attempt, or in the driver at the end of the sweep. A record logged after the
last checkpoint is lost with its process only if it would be logged again: a restored trial
re-trains those epochs.

The run. :meth:`attach` names an existing run (the sweep's parent). For a trial, :meth:`start`
describes the run to create; the thread first looks for a run of the same experiment with the
same ``key`` tags (an earlier attempt's run whose id never reached a checkpoint) and creates one
only if there is none.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from linc_core.utils.atomic import write_atomic
from linc_core.utils.secrets import redact
from orchestration.tracking.journal import JOURNAL_ARTIFACTS, JOURNAL_FILE, read_journal
from orchestration.tracking.records import (
    Outage,
    find_or_create_run,
    is_permanent,
    next_batch,
    quiet_store_tracebacks,
    reason,
    send,
)

logger = logging.getLogger(__name__)

# A request to the store fails fast; the writer's own loop does the retrying (MLflow's default is
# 7 retries with backoff, about 4 minutes, during which the calling thread is frozen).
REQUEST_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
# MLflow prints "View run ... at: URL" when a run ends on a server, the URL with its password;
# linc prints its own links to the runs (sweeps.cli.print_mlflow_ui), masked.
QUIET_RUN_LINKS = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
MAX_BACKOFF_S = 30.0
# A store out of space (SQLite "database or disk is full", a server's disk) does not come back
# by waiting as an unreachable one does: someone must free space. flush gives up after this.
STORE_FULL_GIVE_UP_S = 30.0


class RunWriter:
    """Ordered, buffered, never-raising writes to one MLflow run (see the module docstring).

    Args:
        tracking_uri: the store.
        spool: folder for artifact copies awaiting delivery (default: a new temporary folder).
    """

    def __init__(self, tracking_uri: str, spool: str | Path | None = None):
        for name, value in REQUEST_SETTINGS.items():
            os.environ.setdefault(name, value)
        os.environ.update(QUIET_RUN_LINKS)
        self.tracking_uri = tracking_uri
        self.shown_uri = redact(tracking_uri)  # in messages and the journal (masked)
        self.run_id: str | None = None
        self._own_spool = spool is None  # a temporary one: removed when all is delivered
        self._spool = Path(spool or tempfile.mkdtemp(prefix="linc-tracking-"))
        self._spool.mkdir(parents=True, exist_ok=True)
        self._create: dict[str, Any] | None = None
        self._pending: list[dict[str, Any]] = []
        self._known: set[tuple[str, int]] = set()
        self._verify = False  # read which metric keys the run holds, then their steps
        self._unverified: set[str] = set()  # keys whose steps on the store must be read
        self._lock = threading.Condition()
        self._closed = False
        self._outage = Outage(self.shown_uri)
        quiet_store_tracebacks()
        self._thread = threading.Thread(target=self._deliver_forever, name="linc-run-writer")
        self._thread.daemon = True
        self._thread.start()

    # -- which run -------------------------------------------------------------------------
    def attach(self, run_id: str) -> RunWriter:
        """Write to the existing run ``run_id`` (its logged metric steps are not repeated)."""
        with self._lock:
            self.run_id, self._verify = run_id, True
            self._lock.notify_all()
        return self

    def start(
        self,
        experiment: str,
        run_name: str,
        tags: Mapping[str, str],
        key: Mapping[str, str],
        journal: str | Path | None = None,
    ) -> RunWriter:
        """Create (or find, by its ``key`` tags) the run to write to, in the background; with
        ``journal``, first take back a saved journal (:meth:`restore`)."""
        create = {
            "experiment": experiment,
            "run_name": redact(run_name),
            "tags": redact(dict(tags) | dict(key)),
            "key": dict(key),
        }
        saved = read_journal(journal, self._spool) if journal is not None else None
        with self._lock:
            self._create = create
            if saved is not None:
                self._take_back(saved)
            self._lock.notify_all()
        return self

    # -- what to write (the calls of the ``mlflow`` module linc uses) ----------------------
    def log_params(self, params: Mapping[str, Any]) -> None:
        self._append({"op": "params", "values": {k: redact(str(v)) for k, v in params.items()}})

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        values = {k: float(v) for k, v in metrics.items()}
        stamp = int(time.time() * 1000)
        self._append({"op": "metrics", "values": values, "step": step or 0, "timestamp": stamp})

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        self.log_metrics({key: value}, step)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._append({"op": "tags", "values": redact({k: str(v) for k, v in tags.items()})})

    def set_tag(self, key: str, value: Any) -> None:
        self.set_tags({key: value})

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        """Copy ``local_path`` into the spool now (the caller may delete it) and queue it."""
        source = Path(local_path)
        name = f"{uuid.uuid4().hex[:12]}-{source.name}"
        try:
            shutil.copyfile(source, self._spool / name)
        except OSError as err:
            logger.warning("tracking: artifact %s not logged: %s", source, err)
            return
        self._append({"op": "artifact", "file": name, "name": source.name, "path": artifact_path})

    def log_text(self, text: str, artifact_file: str) -> None:
        self.log_bytes(redact(text).encode(), artifact_file)

    def log_bytes(self, content: bytes, artifact_file: str) -> None:
        """Queue ``content`` as the artifact ``artifact_file`` (``folder/name``; a PNG, a CSV)."""
        folder, _, name = artifact_file.rpartition("/")
        local = self._spool / f"{uuid.uuid4().hex[:12]}-{name}"
        write_atomic(local, content)
        self._append({"op": "artifact", "file": local.name, "name": name, "path": folder or None})

    def log_dict(self, values: Any, artifact_file: str) -> None:
        self.log_text(json.dumps(redact(values), indent=2, default=str), artifact_file)

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        folder, _, name = artifact_file.rpartition("/")
        local = self._spool / f"{uuid.uuid4().hex[:12]}-{name}"
        figure.savefig(local)
        self._append({"op": "artifact", "file": local.name, "name": name, "path": folder or None})

    def set_status(self, status: str) -> None:
        """Queue the run's status: ``RUNNING`` (again), or a final ``FINISHED``, ``FAILED``,
        ``KILLED``."""
        self._append({"op": "status", "status": status})

    def end_run(self, status: str = "FINISHED") -> None:
        self.set_status(status)

    def log_history(self, history: list[Mapping[str, Any]], keys: tuple[str, ...]) -> None:
        """Queue each epoch record's ``keys`` at step ``epoch`` (what a restored checkpoint has
        seen); steps the run already holds are not logged again."""
        for record in history:
            values = {k: record[k] for k in keys if record.get(k) is not None}
            if values:
                self.log_metrics(values, step=int(record["epoch"]))

    # -- delivery --------------------------------------------------------------------------
    def pending(self) -> int:
        with self._lock:
            return len(self._pending) + (self.run_id is None and self._create is not None)

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every record is delivered; True if it was."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._lock.notify_all()
            while self._pending or (self.run_id is None and self._create is not None):
                left = deadline - time.monotonic()
                if left <= 0 or self._outage.full_for() > STORE_FULL_GIVE_UP_S:
                    return False
                self._lock.wait(min(left, 1.0))
        return True

    def close(self, timeout: float, *, warn: bool = True) -> bool:
        """:meth:`flush`, then stop the thread; warns when records remain undelivered (unless
        ``warn`` is False: a caller whose records are safe elsewhere, in a saved journal)."""
        delivered = self.flush(timeout)
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if delivered and self._own_spool:
            shutil.rmtree(self._spool, ignore_errors=True)
        if not delivered and warn and self._outage.full:
            logger.warning(
                "tracking store %s is out of space: %d record(s) not delivered; free space "
                "there and run the same command again (a trial resumes from its newest intact "
                "checkpoint and logs the epochs after it again)",
                self.shown_uri,
                self.pending(),
            )
        elif not delivered and warn:
            logger.warning(
                "tracking store %s: %d record(s) not delivered after %.0f s",
                self.shown_uri,
                self.pending(),
                timeout,
            )
        return delivered

    def save(self, folder: str | Path) -> None:
        """Undelivered records (and artifact files) into ``folder``; a gone file was delivered."""
        folder = Path(folder)
        with self._lock:
            records, state = list(self._pending), {"create": self._create, "run_id": self.run_id}
        artifacts, saved = folder / JOURNAL_ARTIFACTS, []
        shutil.rmtree(artifacts, ignore_errors=True)
        for record in records:
            if record["op"] == "artifact":
                artifacts.mkdir(parents=True, exist_ok=True)
                try:  # copying a delivered one failed trials under load (FileNotFoundError)
                    shutil.copyfile(self._spool / record["file"], artifacts / record["file"])
                except FileNotFoundError:
                    continue
            saved.append(record)
        state |= {"tracking_uri": self.shown_uri, "pending": saved}
        write_atomic(folder / JOURNAL_FILE, json.dumps(state).encode())

    def restore(self, folder: str | Path) -> bool:
        """Queue a saved journal's records (checked: :mod:`orchestration.tracking.journal`)
        ahead of any new ones, for the run this writer :meth:`start`-ed or :meth:`attach`-ed.

        A journal names a run, but whoever writes the sweep's storage writes the journal: the
        run is the one this writer finds by its own ``key``, never the journal's id. Returns
        True when the journal was this run's (the same store and ``key``; a copied sweep's
        trials have another parent, and their records go to this writer's run all the same).
        """
        saved = read_journal(folder, self._spool)
        with self._lock:
            kept = saved is not None and self._take_back(saved)
            self._lock.notify_all()
        return kept

    def _take_back(self, state: dict[str, Any]) -> bool:
        """Apply a loaded journal (the lock is held)."""
        saved = state.get("create") or {}
        mine = self._create is not None and saved.get("key") == self._create.get("key")
        same_store = redact(state.get("tracking_uri") or "") == self.shown_uri  # both masked
        self._pending[:0] = state["pending"]
        self._verify = True
        return bool(same_store and mine)

    # -- the delivery thread ---------------------------------------------------------------
    def _append(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(record)
            self._lock.notify_all()

    def _deliver_forever(self) -> None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=self.tracking_uri)
        failures = 0
        while True:
            with self._lock:
                while not self._closed and not self._work_waiting():
                    self._lock.wait()
                if self._closed:
                    return
            try:
                progressed = self._deliver_next(client)
            except Exception as err:  # noqa: BLE001 - nothing may reach the training thread
                if is_permanent(err):
                    self._drop_first(err)
                    continue
                failures += 1
                self._outage.begin(err, self.pending())
                with self._lock:
                    self._lock.wait(min(MAX_BACKOFF_S, 0.5 * 2 ** min(failures, 6)))
                continue
            failures = 0  # any answer resets the backoff
            if progressed:
                self._outage.end()

    def _work_waiting(self) -> bool:
        return bool(self._pending) or (self.run_id is None and self._create is not None)

    def _deliver_next(self, client: Any) -> bool:
        """One request's worth of delivery: the run, one key's steps, or one batch. Each
        request that succeeds is progress kept, so a store failing a share of requests (a
        sick server) still gets everything through; True once a batch was delivered."""
        if self.run_id is None:
            run_id, found = find_or_create_run(client, self._create)
            with self._lock:
                self.run_id, self._verify = run_id, self._verify or found
                self._lock.notify_all()
        with self._lock:
            metrics_pending = any(r["op"] == "metrics" for r in self._pending)
            verify, unverified = self._verify and metrics_pending, sorted(self._unverified)
        if verify:  # the keys the run holds (a journal replayed, a run found again)
            keys = client.get_run(self.run_id).data.metrics
            with self._lock:
                self._unverified |= set(keys)
                self._verify = False
            return False
        if unverified and metrics_pending:
            key = unverified[0]
            steps = {(key, m.step) for m in client.get_metric_history(self.run_id, key)}
            with self._lock:
                self._known |= steps
                self._unverified.discard(key)
            return False
        with self._lock:
            if not self._pending:
                return True
            batch = next_batch(self._pending)
        try:
            send(client, self.run_id, batch, self._spool, self._known)
        except Exception:
            # the store may have written part of the batch before failing: read those keys'
            # steps back before sending them again, so that no step is logged twice
            with self._lock:
                self._unverified |= {k for r in batch if r["op"] == "metrics" for k in r["values"]}
            raise
        with self._lock:
            del self._pending[: len(batch)]
            self._lock.notify_all()
        return True

    def _drop_first(self, err: Exception) -> None:
        with self._lock:
            if self.run_id is None:  # the run cannot be created: nothing to write to
                what = f"run {self._create and self._create['run_name']!r} and its records"
                self._create = None
                self._pending.clear()
            else:
                what = _describe(self._pending.pop(0)) if self._pending else "a run check"
            self._lock.notify_all()
        logger.warning(
            "tracking store %s refused %s for good, dropped: %s",
            self.shown_uri,
            what,
            reason(err),
        )


def _describe(record: dict[str, Any]) -> str:
    keys = sorted(record.get("values") or {})[:5]
    return f"{record['op']} {keys or record.get('name') or record.get('status')}"


__all__ = ["JOURNAL_FILE", "REQUEST_SETTINGS", "RunWriter"]
