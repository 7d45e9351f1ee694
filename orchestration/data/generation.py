"""Distributed data set generation: a pool of Ray actors writing Parquet shards, local or on S3.

A data set is a pure function of its :class:`~orchestration.data.definition.DatagenConfig`
identity (task, size, count, shard_size, seed, split and the generator's constants): shard
``i`` holds ``min(shard_size, count - i * shard_size)`` instances drawn with the seed
``derive_seed(seed, task, size, split, i)``, so splits never share a seed and any shard can be
regenerated alone, byte for byte (the Parquet writer is deterministic, see
:mod:`linc_core.instances.parquet`).

Layout at ``uri``: ``shard-00000.parquet`` ... and ``manifest.json``. Guarantees:

* A shard appears whole or not at all: locally it is written to a temporary name and renamed;
  on S3 the object only becomes visible once the upload completes.
* ``manifest.json`` (schema version, generator config, counts, per-shard sha256 and size, linc
  and library versions) is written last, after every shard is present and valid. No manifest
  means "incomplete"; readers of a shared set should require it.
* A re-run checks each shard: against the manifest's checksum when there is a manifest, else by
  parsing it (page checksums, schema version, row count and seed metadata). Valid shards are
  kept, missing or corrupt ones regenerated, nothing is duplicated (file names are fixed by the
  shard index). A regenerated shard whose checksum differs from an existing manifest raises
  instead of silently changing the set (e.g. other library versions).
* A re-run with a different config at the same ``uri`` is refused when a manifest exists.
* Storage errors are retried a bounded number of times, then raise
  :class:`~orchestration.data.storage.StorageUnavailableError`; no manifest is written.

Credentials of S3: each actor takes them from the AWS chain of its node (``AWS_*`` variables,
``~/.aws``, the node's role). An actor of a local Ray (no ``RAY_ADDRESS``: this machine), and
any actor when ``forward_aws_env`` is set, gets this process's ``AWS_*`` variables as an
argument of its constructor, which it sets in its own environment: they stay in the processes'
and Ray's memory, never in a ``runtime_env`` (whose variables Ray's agent writes into its log
``runtime_env_agent.log``, readable by every user of the node).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import ray
from ray.exceptions import RayActorError, RayTaskError

import linc_core
from linc_core.instances.datasets import (
    MANIFEST_NAME,
    SHARD_PATTERN,
    manifest_entries,
    read_member,
)
from linc_core.instances.parquet import (
    SCHEMA_VERSION,
    DatasetSchemaError,
    instance_to_table,
    parquet_bytes,
    read_shard_bytes,
    sha256_hex,
)
from linc_core.train.data import generate
from linc_core.utils.atomic import is_temporary, write_atomic
from linc_core.utils.progress import Progress
from linc_core.utils.secrets import environment_snapshot
from orchestration.data.definition import DatagenConfig, ShardSpec
from orchestration.data.storage import is_s3, open_filesystem, with_retries

__all__ = [
    "DatagenError",
    "ShardResult",
    "ShardWorker",
    "build_shard",
    "check_shard",
    "generate_dataset",
]

# Requests in flight per actor: one running, one queued, so an actor never idles waiting for
# the driver while the driver never holds more than two pending results per actor.
_IN_FLIGHT_PER_WORKER = 2


class DatagenError(RuntimeError):
    """Generation could not finish; shards already written are kept for the next run."""


@dataclass(frozen=True)
class ShardResult:
    """Outcome of :meth:`ShardWorker.ensure_shard`.

    ``status`` is ``"kept"`` (valid file reused), ``"generated"`` (absent) or ``"regenerated"``
    (present but invalid; ``reason`` says why).
    """

    index: int
    file: str
    rows: int
    sha256: str
    bytes: int
    status: str
    reason: str = ""
    worker_pid: int = 0


def build_shard(spec: ShardSpec) -> pa.Buffer:
    """Generate shard ``spec`` and serialise it (deterministic bytes)."""
    instance = generate(spec.task, spec.rows, spec.size, spec.seed)
    names = tuple(f"{spec.name_prefix}{spec.first_row + row:07d}" for row in range(spec.rows))
    instance = dataclasses.replace(instance, names=names)
    return parquet_bytes(instance_to_table(instance, spec.metadata))


def check_shard(data: pa.Buffer, spec: ShardSpec, source: str) -> str:
    """Why an existing shard is not the one ``spec`` describes ("" when it is valid)."""
    if spec.expected_sha256 is not None:
        digest = sha256_hex(data)
        return "" if digest == spec.expected_sha256 else f"sha256 {digest} != manifest"
    try:
        instance, metadata = read_shard_bytes(data, source)
    except DatasetSchemaError as err:
        return str(err)
    if instance.problem != spec.task or instance.num_customers != spec.size:
        return f"holds {instance.problem} with {instance.num_customers} customers"
    if instance.batch_size != spec.rows:
        return f"holds {instance.batch_size} rows, expected {spec.rows}"
    for key, value in spec.metadata.items():
        if metadata.get(key) != value:
            return f"metadata linc.{key} = {metadata.get(key)!r}, expected {value!r}"
    return ""


class _ShardWorkerImpl:
    """Generates and writes shards into one data set folder (wrapped as a Ray actor below)."""

    def __init__(self, uri: str, storage_attempts: int, env: dict[str, str] | None = None) -> None:
        import torch

        os.environ.update(env or {})  # the driver's AWS_* (see the module docstring)
        # An actor reserves cpus_per_worker CPUs: one torch thread and one Arrow compute thread
        # (zstd encoding would otherwise fan out over every core) keep it inside that budget.
        torch.set_num_threads(1)
        pa.set_cpu_count(1)
        self._uri = uri.split("?", 1)[0]
        self._filesystem, self._root = open_filesystem(uri)
        self._attempts = storage_attempts

    def pid(self) -> int:
        """The actor's process id (tests kill it to simulate a crashed node)."""
        return os.getpid()

    def ensure_shard(self, spec: ShardSpec) -> ShardResult:
        """Make sure shard ``spec`` exists and is valid; generate it when it is not."""
        path = f"{self._root}/{spec.file}"
        source = f"{self._uri}/{spec.file}"
        status, reason = "generated", ""
        info = self._retry(lambda: self._filesystem.get_file_info(path), f"stat {source}")
        if info.type != pafs.FileType.NotFound:
            # read as every reader reads it: a regular file in the folder, within its cap (one
            # over it, a link out of the folder, a named pipe: refused unread, then replaced)
            try:
                data = self._retry(lambda: self._read(spec.file), f"read {source}")
                reason = check_shard(data, spec, source)
            except DatasetSchemaError as err:
                reason = str(err)
            if not reason:
                return self._result(spec, data, "kept")
            status = "regenerated"
        data = build_shard(spec)
        digest = sha256_hex(data)
        if spec.expected_sha256 is not None and digest != spec.expected_sha256:
            raise DatagenError(
                f"{source}: regenerated shard has sha256 {digest} but the manifest says "
                f"{spec.expected_sha256}; the generator or library versions differ from the run "
                "that wrote the manifest, so the set cannot be repaired in place."
            )
        self._retry(
            lambda: write_atomic(path, data, filesystem=self._filesystem), f"write {source}"
        )
        return self._result(spec, data, status, reason)

    def _result(
        self, spec: ShardSpec, data: pa.Buffer, status: str, reason: str = ""
    ) -> ShardResult:
        return ShardResult(
            index=spec.index,
            file=spec.file,
            rows=spec.rows,
            sha256=sha256_hex(data),
            bytes=data.size,
            status=status,
            reason=reason,
            worker_pid=os.getpid(),
        )

    def _retry(self, operation: Callable[[], Any], what: str) -> Any:
        return with_retries(operation, what, attempts=self._attempts)

    def _read(self, file: str) -> pa.Buffer:
        return pa.py_buffer(read_member(self._uri, self._filesystem, self._root, file))


ShardWorker = ray.remote(_ShardWorkerImpl)


def generate_dataset(
    config: DatagenConfig,
    *,
    on_shard_done: Callable[[ShardResult], None] | None = None,
) -> dict[str, Any]:
    """Generate (or complete, or verify) the data set ``config`` describes, on the current Ray.

    Args:
        config: what to generate and how (Ray must be initialised by the caller).
        on_shard_done: called in the driver with each shard's result, as it completes.

    Returns:
        The manifest written to ``{uri}/manifest.json``.

    Raises:
        StorageUnavailableError: storage unreachable after the bounded retries (no manifest).
        DatagenError: a worker died or a shard cannot be reproduced; a different data set
            already lives at ``uri``; unexpected shard files. Completed shards are kept.
    """
    filesystem, root = open_filesystem(config.uri)
    local = isinstance(filesystem, pafs.LocalFileSystem)
    display_uri = config.uri.split("?", 1)[0]
    attempts = config.storage_attempts
    manifest_path = f"{root}/{MANIFEST_NAME}"

    def retry(operation: Callable[[], Any], what: str) -> Any:
        return with_retries(operation, f"{what} ({display_uri})", attempts=attempts)

    if local:
        filesystem.create_dir(root, recursive=True)
    existing = retry(
        lambda: filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True)),
        "list the data set folder",
    )
    expected = _expected_checksums(filesystem, manifest_path, existing, config, retry)
    _check_no_strays(existing, config, display_uri)
    if local:
        for info in existing:  # temporaries left by a killed worker
            if is_temporary(info.base_name):
                filesystem.delete_file(info.path)

    specs = config.shard_specs(expected)
    results = _run_pool(config, specs, on_shard_done)

    manifest = {
        "schema_version": SCHEMA_VERSION,
        "linc_version": linc_core.__version__,
        "generator": config.identity(),
        "counts": {"instances": config.count, "shards": config.num_shards},
        "libraries": {
            "pyarrow": pa.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "shards": [
            {
                "file": r.file,
                "index": r.index,
                "rows": r.rows,
                "seed": s.seed,
                "sha256": r.sha256,
                "bytes": r.bytes,
            }
            for r, s in zip(results, specs, strict=True)
        ],
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    retry(
        lambda: write_atomic(manifest_path, text.encode(), filesystem=filesystem),
        "write manifest.json",
    )
    return manifest


def _expected_checksums(
    filesystem: pafs.FileSystem,
    manifest_path: str,
    existing: list[pafs.FileInfo],
    config: DatagenConfig,
    retry: Callable[[Callable[[], Any], str], Any],
) -> dict[int, str] | None:
    """Checksums from an existing manifest of the same config; refuse a different config."""
    found = [info for info in existing if info.path == manifest_path]
    if not found:
        return None
    source = f"{config.uri}/{MANIFEST_NAME}"

    def read() -> bytes:  # a regular file in the folder, within its cap, as readers read it
        folder = manifest_path.rsplit("/", 1)[0]
        try:
            return bytes(read_member(config.uri, filesystem, folder, MANIFEST_NAME))
        except DatasetSchemaError as err:
            raise DatagenError(f"{err}; choose another uri or delete it") from None

    try:
        manifest = json.loads(retry(read, "read manifest.json").decode("utf-8"))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise DatagenError(f"{source}: not a JSON manifest ({err}); choose another uri") from None
    if not isinstance(manifest, dict):
        raise DatagenError(f"{source}: not a manifest (a JSON object); choose another uri")
    if manifest.get("generator") != config.identity():
        raise DatagenError(
            f"{config.uri}: holds a different data set (manifest generator config "
            f"{manifest.get('generator')!r}); choose another uri or delete it"
        )
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise DatagenError(
            f"{config.uri}/{MANIFEST_NAME}: schema_version {manifest.get('schema_version')!r}, "
            f"this linc writes {SCHEMA_VERSION}; choose another uri"
        )
    try:  # the one check of a manifest's shard entries (file names inside the folder...)
        entries = manifest_entries(manifest, source)
    except DatasetSchemaError as err:
        raise DatagenError(f"{err}; choose another uri or delete it") from None
    return {int(SHARD_PATTERN.fullmatch(e.file)[1]): str(e.sha256) for e in entries}


def _check_no_strays(existing: list[pafs.FileInfo], config: DatagenConfig, uri: str) -> None:
    strays = [
        info.base_name
        for info in existing
        if (match := SHARD_PATTERN.fullmatch(info.base_name)) and int(match[1]) >= config.num_shards
    ]
    if strays:
        raise DatagenError(
            f"{uri}: shard files beyond this config's {config.num_shards} shards: "
            f"{sorted(strays)[:5]}...; another data set was written here"
        )


def _run_pool(
    config: DatagenConfig,
    specs: list[ShardSpec],
    on_shard_done: Callable[[ShardResult], None] | None,
) -> list[ShardResult]:
    """Ensure every shard with a pool of actors, at most two requests in flight per actor."""
    options: dict[str, Any] = {
        "num_cpus": config.cpus_per_worker,
        "max_restarts": config.max_actor_restarts,
        # A restarted actor retries the interrupted shard: writes are idempotent.
        "max_task_retries": config.max_actor_restarts,
    }
    env = {}
    local = os.environ.get("RAY_ADDRESS") in (None, "", "local")
    if is_s3(config.uri) and (config.forward_aws_env or local):
        env = {k: v for k, v in environment_snapshot().items() if k.startswith("AWS_")}
    workers = [
        ShardWorker.options(**options).remote(config.uri, config.storage_attempts, env)
        for _ in range(min(config.workers, len(specs)))
    ]
    pending = list(reversed(specs))
    in_flight: dict[ray.ObjectRef, tuple[Any, ShardSpec]] = {}
    results: dict[int, ShardResult] = {}

    def submit(worker: Any) -> None:
        if pending:
            spec = pending.pop()
            in_flight[worker.ensure_shard.remote(spec)] = (worker, spec)

    desc = f"{config.task}{config.size} {config.split}"
    bar = Progress(config.count, desc, "instance", enabled=config.progress)
    try:
        for worker in workers:
            for _ in range(_IN_FLIGHT_PER_WORKER):
                submit(worker)
        while in_flight:
            [ready], _ = ray.wait(list(in_flight), num_returns=1)
            worker, spec = in_flight.pop(ready)
            try:
                result: ShardResult = ray.get(ready)
            except RayActorError as err:
                raise DatagenError(
                    f"{config.uri}: a worker died while making shard {spec.index} "
                    f"({err.__class__.__name__}); finished shards are kept, re-run to resume"
                ) from err
            except RayTaskError as err:
                cause = err.cause if isinstance(err.cause, Exception) else err
                raise cause from err
            results[result.index] = result
            bar.update(result.rows)
            if on_shard_done is not None:
                on_shard_done(result)
            submit(worker)
    finally:
        bar.close()
        for worker in workers:
            ray.kill(worker)
    return [results[spec.index] for spec in specs]
