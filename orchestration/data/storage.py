"""Data set storage locations: local folders or S3 (pyarrow's S3 filesystem), with bounded retries.

A location is a URI. A plain path (``data/cvrptw100-train``) or ``file://`` URI is a local
folder. ``s3://bucket/prefix`` is an S3 prefix; query parameters configure S3-compatible
stores: ``endpoint_override=host:port``, ``scheme=http|https``, ``region=...``, e.g.
``s3://linc/cvrptw100-train?endpoint_override=127.0.0.1:9000&scheme=http``. Credentials come
from the standard AWS chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` variables,
``~/.aws`` files, instance metadata): they are never part of a URI (a URI with user info or a
credential parameter is refused, its secret masked in the message).

Every storage call made through :func:`with_retries` is retried a bounded number of times with
exponential backoff and then raises :class:`StorageUnavailableError`, whose message names the
location and the last error.
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

import pyarrow.fs as pafs

from linc_core.instances import Instance
from linc_core.instances.datasets import load_dataset, resolve_filesystem
from linc_core.train.data import ShardedTrainingData
from linc_core.utils.secrets import redact

__all__ = [
    "out_of_space",
    "is_out_of_space",
    "StorageUnavailableError",
    "is_s3",
    "load_evaluation_set",
    "open_filesystem",
    "open_training_data",
    "with_retries",
]

T = TypeVar("T")

_S3_QUERY_KEYS = ("endpoint_override", "scheme", "region")
# Per request, inside the AWS SDK; our own retries (with_retries) wrap whole operations.
_SDK_ATTEMPTS = 2
_CONNECT_TIMEOUT_S = 2.0
_REQUEST_TIMEOUT_S = 10.0


class StorageUnavailableError(OSError):
    """The storage location could not be reached after the allowed retries."""


# What storage out of space answers: the OS's words (a file, pyarrow's upload), SQLite's and a
# tracking server relaying either in its 500.
OUT_OF_SPACE_SIGNS = ("database or disk is full", "no space left on device")


def is_out_of_space(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) says the storage is out of space."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if any(sign in str(seen).lower() for sign in OUT_OF_SPACE_SIGNS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def out_of_space(storage: str, err: BaseException | None = None) -> bool:
    """Whether ``err`` says so (:func:`is_out_of_space`), or ``storage`` is a local folder whose
    file system has less than 1 MiB free (an error of a reader of a file the full storage left
    empty says nothing of space)."""
    if err is not None and is_out_of_space(err):
        return True
    if "://" in storage:
        return False
    try:
        return shutil.disk_usage(storage).free < 1 << 20
    except OSError:
        return False


def is_s3(uri: str) -> bool:
    return uri.startswith("s3://")


def open_filesystem(uri: str, sdk_attempts: int = _SDK_ATTEMPTS) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, root path)`` for a data set URI (see the module docstring);
    ``sdk_attempts``: tries of each S3 request inside the AWS SDK (more for storage that only
    Tune writes to, which has no retries of its own around them).

    Raises:
        ValueError: an S3 URI with no bucket or an unknown query parameter.
    """
    if not is_s3(uri):
        return resolve_filesystem(uri)
    parts = urlsplit(uri)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(query) - set(_S3_QUERY_KEYS))
    if unknown:
        known = f"known: {', '.join(_S3_QUERY_KEYS)}; credentials come from the AWS chain"
        raise ValueError(f"{redact(uri)}: unknown S3 URI parameter(s) {unknown} ({known})")
    if not parts.netloc:
        raise ValueError(f"{redact(uri)}: an S3 URI needs a bucket (s3://bucket/prefix)")
    if "@" in parts.netloc:
        raise ValueError(
            f"{redact(uri)}: an S3 URI names no user or key (s3://bucket/prefix); credentials "
            "come from the AWS chain (AWS_* variables, ~/.aws, the node's role)"
        )
    filesystem = pafs.S3FileSystem(
        endpoint_override=query.get("endpoint_override"),
        scheme=query.get("scheme", "https"),
        region=query.get("region", "us-east-1"),
        connect_timeout=_CONNECT_TIMEOUT_S,
        request_timeout=_REQUEST_TIMEOUT_S,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=sdk_attempts),
    )
    return filesystem, f"{parts.netloc}{parts.path}".rstrip("/")


def with_retries(
    operation: Callable[[], T],
    what: str,
    *,
    attempts: int = 3,
    backoff_s: float = 0.25,
) -> T:
    """Run a storage ``operation``, retrying ``OSError`` up to ``attempts`` times in all.

    Args:
        operation: the call to make (no arguments).
        what: description for the error, e.g. ``"read s3://b/p/manifest.json"``.
        attempts: total tries (>= 1).
        backoff_s: sleep before the second try; doubled before each further one.

    Raises:
        StorageUnavailableError: every try failed; chained to the last error.
    """
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except FileNotFoundError:
            raise  # an answer, not an outage
        except OSError as err:
            if attempt == attempts or err.errno == errno.ELOOP:  # a link refused: an answer too
                raise StorageUnavailableError(
                    redact(f"could not {what} after {_attempts(attempt)}: {err}")
                ) from err
            time.sleep(backoff_s * 2 ** (attempt - 1))
    raise AssertionError("unreachable")


def _attempts(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"


def open_training_data(
    uri: str, batch_size: int, seed: int, *, shuffle: bool = True
) -> ShardedTrainingData:
    """Streaming, shuffled training batches from a data set at ``uri`` (local or S3)."""
    filesystem, root = open_filesystem(uri)
    return ShardedTrainingData(root, batch_size, seed, filesystem=filesystem, shuffle=shuffle)


def load_evaluation_set(uri: str) -> Instance:
    """A whole data set at ``uri`` (local or S3) as one batch, checksums verified."""
    filesystem, root = open_filesystem(uri)
    return load_dataset(root, filesystem)
