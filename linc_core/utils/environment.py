"""The process environment read whole while other threads change it."""

from __future__ import annotations

import os

_ATTEMPTS = 20


def environment_snapshot() -> dict[str, str]:
    """``os.environ`` as a plain dict, safe while another thread sets and unsets variables.

    ``os.environ.items()`` reads one variable at a time in Python code: one that another thread
    removes in between raises ``KeyError`` (MLflow's telemetry thread sets and unsets
    ``_MLFLOW_TELEMETRY_SESSION_ID``; ``linc-ablation`` once ended in that traceback), and the
    iteration itself may see the mapping change size. CPython keeps the variables in one dict,
    ``os.environ._data``, which one C call copies whole; elsewhere the read is retried.
    """
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        copied = dict(data)  # one C-level copy: no other thread runs in between
        return {os.fsdecode(key): os.fsdecode(value) for key, value in copied.items()}
    for _ in range(_ATTEMPTS - 1):
        try:
            return dict(os.environ.items())
        except (KeyError, RuntimeError):  # a variable removed, or the mapping resized, meanwhile
            continue
    return dict(os.environ.items())


__all__ = ["environment_snapshot"]
