"""What a run logs as params: nested settings flattened to dotted keys, values masked and cut
to MLflow's length limit, and anything whose key looks like a credential dropped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linc_core.utils.secrets import (
    CREDENTIAL_PATTERN,
    learn_secrets,
    looks_like_credential,
    redact,
)

# The limit MLflow itself enforces on a parameter value (``mlflow.utils.validation``; a test
# keeps the two equal). Not imported from there: importing mlflow costs a trial process about
# a second on its critical path, and a trial's writer thread imports it off that path.
MAX_PARAM_VAL_LENGTH = 6000


def flatten_params(
    params: Mapping[str, Any], *, prefix: str = "", max_length: int = MAX_PARAM_VAL_LENGTH
) -> dict[str, str]:
    """Nested mapping -> ``{"a.b.c": "value"}`` with string values of at most ``max_length``.

    Keys that look like credentials (``linc_core.utils.secrets.CREDENTIAL_PATTERN``) are
    omitted together with everything nested under them (a masked value says nothing); every
    other value is masked (``linc_core.utils.secrets.redact``: a URI's password, a credential
    query parameter, a secret this process knows). Lists and tuples are logged as their ``str``.
    """
    flat: dict[str, str] = {}
    for raw_key, value in params.items():
        key = f"{prefix}{raw_key}"
        if looks_like_credential(key):
            learn_secrets({key: value})  # the same secret elsewhere is masked too
            continue
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{key}.", max_length=max_length))
            continue
        text = redact(str(value))
        flat[key] = text[:max_length]
    return flat


__all__ = ["CREDENTIAL_PATTERN", "MAX_PARAM_VAL_LENGTH", "flatten_params", "looks_like_credential"]
