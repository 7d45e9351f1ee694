"""Pre-flight: before Ray starts, the sweep's storage, tracking store and data answer.

A sweep that cannot write its results should fail in a second with one line naming the setting
and the place, not after Ray started, a parent run was created and every trial retried:

* ``cluster.storage``: writable (a probe object written and deleted, local folder or S3);
* ``tracking.uri``: a SQLite store's folder writable and its database open for writing; a server
  answers (``search_experiments``, failing fast); another database (``postgresql://...``) takes
  a connection (:func:`check_database`, also of ``search.storage``); a reader's store
  (``linc-report``'s) there and readable, nothing created (:func:`check_readable_store`);
* ``data.uri`` / ``data.eval_uri``: a data set's manifest readable and of the task's problem
  (the training set of its size too);
  a benchmark (``eval_source: benchmark``) read, not empty, of the task's problem; a fixed
  evaluation set (``solomon50``) of the task's problem, and readable, as a training source too.

Each failure raises :class:`~orchestration.failures.SweepRefused` (the entry points print it on
one line and exit 2), its URIs and reasons masked
(:func:`linc_core.utils.secrets.redact`: ``postgresql://linc:***@db/mlflow``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import uuid
from pathlib import Path

from linc_core.evaluate.benchmark_sets import load_benchmark
from linc_core.instances.datasets import MANIFEST_NAME, read_manifest
from linc_core.runs.plan import RunPlan
from linc_core.utils.secrets import redact
from orchestration.config.platform import PlatformConfig
from orchestration.config.sections import EVALUATION_SET_PROBLEMS
from orchestration.data.storage import open_filesystem
from orchestration.failures import SweepRefused
from orchestration.tracking.target import TrackingTarget
from orchestration.tracking.writer import REQUEST_SETTINGS

PROBE_PREFIX = ".linc-preflight-"
DATABASE_CONNECT_TIMEOUT_S = 10


def preflight(config: PlatformConfig) -> TrackingTarget:
    """Check the storage, the data and the tracking store of ``config`` (see the module
    docstring), and return the tracking target, resolved here once for the whole sweep;
    nothing is created but the storage folder itself."""
    storage = config.cluster.storage_path()
    check_writable("cluster.storage", storage)
    run = config.run
    problem = run.data.problem
    if run.data.source == "dataset" and run.data.uri:
        check_readable("data.uri", run.data.uri, problem, run.data.num_customers)
    sources = (("data.source", run.data.source), ("data.eval_source", run.evaluation.source))
    for setting, source in sources:
        if source in EVALUATION_SET_PROBLEMS:  # a fixed set read from $LINC_DATA_DIR
            check_fixed_set(setting, source)
    if run.evaluation.source == "dataset" and run.evaluation.uri:
        check_readable("data.eval_uri", run.evaluation.uri, problem)
    if run.evaluation.source == "benchmark":
        check_benchmark(run)
    held = EVALUATION_SET_PROBLEMS.get(run.evaluation.source, problem)
    if held != problem:
        raise SweepRefused(
            f"data.eval_source: {run.evaluation.source} holds {held} instances; the task is "
            f"{problem} (evaluate on validation, a {problem} dataset or benchmark)"
        )
    tracking = TrackingTarget.resolve(config.tracking, storage)
    check_tracking(tracking.uri)
    return tracking


def check_benchmark(run: RunPlan) -> None:
    """The final evaluation's benchmark readable, of the task's problem, not empty: a sweep
    refused in one line before any trial trains, not trials failing after their training."""
    source = run.evaluation
    try:
        loaded = load_benchmark(
            str(source.uri), limit=source.limit, max_customers=source.max_customers
        )
    except (ValueError, OSError) as err:
        reason = " ".join(str(err).replace("--benchmark ", "").split())
        raise SweepRefused(f"data.eval_uri: {reason}") from None
    if not loaded.instances:
        raise SweepRefused(f"data.eval_uri: no instance in {source.uri!r} to evaluate on")
    problem = loaded.instances[0].problem
    if problem != run.data.problem:
        raise SweepRefused(
            f"data.eval_uri: {source.uri!r} holds {problem} instances; the task is "
            f"{run.data.problem}"
        )


def check_fixed_set(setting: str, name: str) -> None:
    """The fixed set ``name`` (``solomon50``) readable where linc finds benchmark data."""
    try:
        loaded = load_benchmark(name, limit=1)
    except (ValueError, OSError) as err:
        raise SweepRefused(f"{setting}: {name}: {' '.join(str(err).split())}") from None
    if not loaded.instances:
        raise SweepRefused(f"{setting}: {name}: no instance could be read")


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
        # mkdir over a file says "File exists"; the trouble is that it is no folder
        reason = "Not a directory" if isinstance(err, FileExistsError) else _reason(err)
        raise SweepRefused(f"{setting}: cannot write to {redact(location)} ({reason})") from None


DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")


def store_scheme(uri: str) -> str:
    """The kind of MLflow store ``uri`` names: its scheme without a driver
    (``postgresql+psycopg2://`` is ``postgresql``), ``""`` for a plain path."""
    return uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""


def _no_sqlite_file(setting: str, uri: str, scheme: str) -> None:
    """``sqlite://`` and ``sqlite://HOST/...`` name no file: an in-memory store, gone with the
    process (a sweep's trials would each log to their own), or a URL SQLite cannot open."""
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        message = f"{setting}: {redact(uri)} names no database file (expected sqlite:///PATH)"
        raise SweepRefused(message)


def check_tracking(uri: str) -> None:
    """The store ``uri`` can be written (SQLite, a folder) or answers (a server, a database)."""
    scheme = store_scheme(uri)
    _no_sqlite_file("tracking.uri", uri, scheme)
    if scheme in ("http", "https"):
        check_server(uri)
    elif scheme in DATABASE_SCHEMES:
        check_database("tracking.uri", uri)
    elif scheme == "sqlite":
        _check_sqlite(uri)
    elif scheme in ("file", ""):
        check_writable("tracking.uri", uri.removeprefix("file://"))


def check_readable_store(setting: str, uri: str) -> None:
    """The store ``uri`` can be read and is already there (a reader must not create an empty
    one): a server answers, a database takes a connection, a SQLite file or a folder store
    exists and a SQLite file holds MLflow's tables (opened read-only). Other schemes are left
    to MLflow."""
    scheme = store_scheme(uri)
    _no_sqlite_file(setting, uri, scheme)
    if scheme in ("http", "https"):
        check_server(uri, setting)
    elif scheme in DATABASE_SCHEMES:
        check_database(setting, uri)
    elif scheme in ("sqlite", "file", ""):
        path = Path(uri.removeprefix("sqlite:///").removeprefix("file://")).expanduser()
        if not path.exists():
            raise SweepRefused(
                f"{setting}: no {'database' if scheme == 'sqlite' else 'store'} "
                f"at {redact(str(path))}"
            )
        if scheme == "sqlite":
            problem = _not_a_store(path)
        else:
            problem = None if path.is_dir() else "not a folder"
        if problem is not None:
            raise SweepRefused(f"{setting}: {redact(str(path))} is {problem}")


def _not_a_store(database: Path) -> str | None:
    """Why the SQLite file ``database`` is no MLflow store (None: it is one), read without a
    write: MLflow would retry a folder for minutes, print SQLAlchemy's traceback for a device
    or another kind of file, and create its tables in an empty file or another database."""
    if not database.is_file():  # a folder, /dev/zero, a link to either
        return "not a file"
    uri = f"{database.resolve().as_uri()}?mode=ro"  # read-only: the file is left as it is
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as connection:
            found = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'experiments'"
            ).fetchone()
    except sqlite3.Error as err:
        return f"not an SQLite database ({err})"
    return None if found else "an SQLite file without MLflow's tables"


def check_database(setting: str, url: str) -> None:
    """The database at SQLAlchemy ``url`` takes a connection (SQLite: its folder writable and
    an existing file open for writing, :func:`_check_sqlite`); nothing is written."""
    if url.startswith("sqlite:"):
        if url not in ("sqlite://", "sqlite:///:memory:"):
            _check_sqlite(url, setting)
        return
    import sqlalchemy

    try:
        backend = sqlalchemy.engine.make_url(url).get_backend_name()
        timeout = {"connect_timeout": DATABASE_CONNECT_TIMEOUT_S}
        engine = sqlalchemy.create_engine(
            url, connect_args=timeout if backend in ("postgresql", "mysql") else {}
        )
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except ImportError as err:  # SQLAlchemy's default driver of the scheme is not installed
        message = f"{setting}: no database driver for {redact(url)} ({err}); name an installed one"
        raise SweepRefused(f"{message} (postgresql+psycopg2://...)") from None
    except (sqlalchemy.exc.SQLAlchemyError, ValueError) as err:
        cause = getattr(err, "orig", None) or err  # the driver's words, not SQLAlchemy's frame
        message = f"{setting}: the database {redact(url)} does not answer ({_reason(cause)})"
        raise SweepRefused(message) from None


def check_readable(
    setting: str, uri: str, problem: str | None = None, customers: int | None = None
) -> None:
    """A data set's manifest at ``uri`` can be read and passes the one manifest check
    (:func:`~linc_core.instances.datasets.read_manifest`) and, given ``problem`` (and
    ``customers``), its generator made instances of that problem (and size): a manifest that
    names none is not checked."""
    try:
        filesystem, root = open_filesystem(uri)
        manifest = read_manifest(root, filesystem)
    except (OSError, ValueError) as err:  # DatasetSchemaError is a ValueError
        message = f"{setting}: cannot read the data set {redact(uri)} ({_reason(err)})"
        raise SweepRefused(message) from None
    if manifest is None:
        raise SweepRefused(
            f"{setting}: cannot read the data set {redact(uri)} (no {MANIFEST_NAME})"
        )
    generator = manifest.get("generator")
    task = generator.get("task") if isinstance(generator, dict) else None
    if problem is not None and task is not None and task != problem:
        message = f"{setting}: the data set {redact(uri)} holds {task} instances"
        raise SweepRefused(f"{message}; the task is {problem}")
    size = generator.get("size") if isinstance(generator, dict) else None
    if customers is not None and isinstance(size, int) and size != customers:
        # trained on the set's size, validated and logged at the task's: refused, not mixed
        message = f"{setting}: the data set {redact(uri)} holds {task}{size} instances"
        raise SweepRefused(f"{message}; the task has {customers} customers (task.num_customers)")


def _check_sqlite(uri: str, setting: str = "tracking.uri") -> None:
    path = Path(uri.removeprefix("sqlite:///")).expanduser()
    check_writable(setting, str(path.parent))
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
        message = f"{setting}: cannot write to {redact(str(path))} ({_reason(err)})"
        raise SweepRefused(message) from None


def check_server(uri: str, setting: str = "tracking.uri") -> None:
    """The MLflow server at ``uri`` answers a search, failing fast (``REQUEST_SETTINGS``: a
    few seconds, not MLflow's minutes of retries); ``setting`` names it in the refusal."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    for name, value in REQUEST_SETTINGS.items():
        os.environ.setdefault(name, value)
    try:
        MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except (MlflowException, OSError) as err:
        message = f"{setting}: the store {redact(uri)} does not answer ({_reason(err)})"
        raise SweepRefused(message) from None


def _reason(err: BaseException) -> str:
    """The operating system's words when the error carries them (``Connection refused``),
    masked."""
    text = redact(" ".join(str(getattr(err, "strerror", None) or err).split()))
    found = re.search(r"\[Errno \d+\] ([^'\")\]]+)", text)
    return found.group(1).strip() if found else text[:200]


__all__ = [
    "check_database",
    "check_readable",
    "check_readable_store",
    "check_server",
    "check_tracking",
    "store_scheme",
    "check_writable",
    "preflight",
]
