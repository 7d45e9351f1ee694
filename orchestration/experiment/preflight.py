"""Pre-flight: before Ray starts, the sweep's storage, tracking store and data answer.

A sweep that cannot write its results should fail in a second with one line naming the setting
and the place, not after Ray started, a parent run was created and every trial retried:

* ``cluster.storage``: writable (a probe object written and deleted, local folder or S3);
* ``tracking.uri``: a SQLite store's folder writable and its database open for writing; a server
  answers (``search_experiments``, failing fast);
* ``data.uri`` / ``data.eval_uri``: a data set's manifest readable.

Each failure raises :class:`PreflightError` (a :class:`~linc_core.utils.typed.ConfigError`:
the entry points print it on one line and exit 2).
"""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from pathlib import Path

from linc_core.instances.datasets import MANIFEST_NAME
from linc_core.utils.typed import ConfigError
from orchestration.config.platform import PlatformConfig
from orchestration.data.storage import open_filesystem
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import REQUEST_SETTINGS

PROBE_PREFIX = ".linc-preflight-"


class PreflightError(ConfigError):
    """A setting whose storage or server cannot be used (names the setting and the place)."""


def preflight(config: PlatformConfig) -> TrackingTarget:
    """Check the storage, the data and the tracking store of ``config`` (see the module
    docstring), and return the tracking target, resolved here once for the whole sweep;
    nothing is created but the storage folder itself."""
    storage = config.cluster.storage_path()
    check_writable("cluster.storage", storage)
    run = config.run
    if run.data.source == "dataset" and run.data.uri:
        check_readable("data.uri", run.data.uri)
    if run.evaluation.source == "dataset" and run.evaluation.uri:
        check_readable("data.eval_uri", run.evaluation.uri)
    tracking = TrackingTarget.resolve(config.tracking, storage)
    check_tracking(tracking.uri)
    return tracking


def check_writable(setting: str, location: str) -> None:
    """Write and delete a probe file in ``location`` (a folder, created if missing, or S3)."""
    try:
        if "://" not in location:
            Path(location).mkdir(parents=True, exist_ok=True)
        filesystem, root = open_filesystem(location)
        probe = f"{root.rstrip('/')}/{PROBE_PREFIX}{uuid.uuid4().hex}"
        with filesystem.open_output_stream(probe) as stream:
            stream.write(b"linc")
        filesystem.delete_file(probe)
    except (OSError, ValueError) as err:
        raise PreflightError(f"{setting}: cannot write to {location} ({_reason(err)})") from None


def check_tracking(uri: str) -> None:
    """The store ``uri`` can be written (SQLite, a folder) or answers (a server)."""
    if uri.startswith("sqlite:///"):
        _check_sqlite(uri)
    elif uri.startswith(("http://", "https://")):
        _check_server(uri)
    elif "://" not in uri or uri.startswith("file://"):
        check_writable("tracking.uri", uri.removeprefix("file://"))


def check_readable(setting: str, uri: str) -> None:
    """A data set's manifest at ``uri`` can be read."""
    try:
        filesystem, root = open_filesystem(uri)
        with filesystem.open_input_stream(f"{root.rstrip('/')}/{MANIFEST_NAME}") as stream:
            stream.read(1)
    except (OSError, ValueError) as err:
        message = f"{setting}: cannot read the data set {uri} ({_reason(err)})"
        raise PreflightError(message) from None


def _check_sqlite(uri: str) -> None:
    path = Path(uri.removeprefix("sqlite:///")).expanduser()
    check_writable("tracking.uri", str(path.parent))
    if not path.exists():
        return  # a new store: its folder is writable
    try:
        connection = sqlite3.connect(path, timeout=10)
        try:
            connection.execute("BEGIN IMMEDIATE")  # takes the write lock; nothing is written
            connection.rollback()
        finally:
            connection.close()
    except sqlite3.Error as err:
        raise PreflightError(f"tracking.uri: cannot write to {path} ({err})") from None


def _check_server(uri: str) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    for name, value in REQUEST_SETTINGS.items():
        os.environ.setdefault(name, value)
    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except (MlflowException, OSError) as err:
        message = f"tracking.uri: the store {uri} does not answer ({_reason(err)})"
        raise PreflightError(message) from None


def _reason(err: BaseException) -> str:
    """The operating system's words when the error carries them (``Connection refused``)."""
    text = " ".join(str(getattr(err, "strerror", None) or err).split())
    found = re.search(r"\[Errno \d+\] ([^'\")\]]+)", text)
    return found.group(1).strip() if found else text[:200]


__all__ = ["PreflightError", "check_readable", "check_tracking", "check_writable", "preflight"]
