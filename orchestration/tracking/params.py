"""What a run logs as params: nested settings flattened to dotted keys, values cut to
MLflow's length limit, and anything whose key looks like a credential dropped."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# The limit MLflow itself enforces on a parameter value (``mlflow.utils.validation``; a test
# keeps the two equal). Not imported from there: importing mlflow costs a trial process about
# a second on its critical path, and a trial's writer thread imports it off that path.
MAX_PARAM_VAL_LENGTH = 6000

CREDENTIAL_PATTERN = re.compile(
    r"secret|password|token|key_id|access_key|credential", re.IGNORECASE
)


def looks_like_credential(key: str) -> bool:
    """True when any part of a (dotted) key names a secret, token, password or access key."""
    return CREDENTIAL_PATTERN.search(key) is not None


def flatten_params(
    params: Mapping[str, Any], *, prefix: str = "", max_length: int = MAX_PARAM_VAL_LENGTH
) -> dict[str, str]:
    """Nested mapping -> ``{"a.b.c": "value"}`` with string values of at most ``max_length``.

    Keys that look like credentials (see ``CREDENTIAL_PATTERN``) are omitted together with
    everything nested under them. Lists and tuples are logged as their ``str``.
    """
    flat: dict[str, str] = {}
    for raw_key, value in params.items():
        key = f"{prefix}{raw_key}"
        if looks_like_credential(key):
            continue
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{key}.", max_length=max_length))
            continue
        text = str(value)
        flat[key] = text[:max_length]
    return flat


__all__ = ["CREDENTIAL_PATTERN", "MAX_PARAM_VAL_LENGTH", "flatten_params", "looks_like_credential"]
