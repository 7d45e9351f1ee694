"""Reading ``.pt`` files (linc checkpoints, the reference's checkpoints) without running code.

A ``.pt`` file is a pickle, and a pickle names functions that unpickling calls: a file from
shared storage, a registered model's artifacts or a download could run anything as whoever
loads it. Its SHA-256 manifest does not help (whoever writes a checkpoint writes its
manifest). Every load in linc therefore goes through :func:`load_tensor_file`, which reads with
torch's weights-only unpickler (``torch.load(weights_only=True)``): tensors and their storages,
dicts, lists, tuples, strings, numbers, booleans, None and a few torch types (``torch.Size``,
dtypes, devices), nothing else. A file that names any other function or class is refused
before anything in it runs, as one :class:`CheckpointError` line naming the file and what it
named; nothing is added to torch's allow-list.

Why ``weights_only`` and not safetensors plus JSON: linc's checkpoint is nested (configs, the
optimizer's state with integer keys and per-parameter tensors, the metric history, the position
inside an epoch) where safetensors holds one flat name-to-tensor table, and the checkpoints
already written, linc's and the reference's released ones, keep loading unchanged. The
weights-only unpickler executes no global outside torch's fixed list (torch is pinned at 2.13;
the bypass fixed in 2.6 does not apply). The writer side keeps to the same rule:
:func:`check_plain` refuses to save a payload holding anything else (a numpy scalar in a
history row, say), so a checkpoint linc writes always loads.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
from typing import Any

import torch

from linc_core.utils.files import FileRefusedError, open_regular_file

_PLAIN = (str, bytes, int, float, bool, type(None), torch.Tensor, torch.Size, torch.dtype)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Largest .pt file read: a full linc model's checkpoint is about 6 MB (models/*.pt) and torch
# reads every tensor into memory, so no valid file comes near it and a wrong one is not read.
MAX_TENSOR_FILE_BYTES = 2 * 1024**3


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: truncated, corrupt, unreadable, or holding objects
    other than tensors and plain data (the message names the file, on one line)."""


def load_tensor_file(
    path: str | os.PathLike[str],
    map_location: str | torch.device = "cpu",
    *,
    name: str | None = None,
) -> Any:
    """The tensors and plain data in the ``.pt`` file ``path``; nothing in it is run.

    Args:
        path: the file.
        map_location: where tensors go (``torch.load``'s argument).
        name: how errors name the file (e.g. its storage URI when ``path`` is a local copy).

    Raises:
        CheckpointError: the file names a function or class (refused unrun, the global named
            when torch reports it), or is missing, truncated, or no torch file; or ``path`` is
            no regular file (a named pipe, a device) or one over ``MAX_TENSOR_FILE_BYTES``.
    """
    name = name or str(path)
    try:
        # a regular file only: a named pipe would block torch's open, /dev/zero fill memory
        opened = open_regular_file(path, max_bytes=MAX_TENSOR_FILE_BYTES, source=name)
        with opened as handle, warnings.catch_warnings():
            # torch's notes on a file's pickle protocol are not the user's business
            warnings.simplefilter("ignore")
            return torch.load(handle, map_location=map_location, weights_only=True)
    except FileRefusedError as err:
        raise CheckpointError(f"checkpoint {name}: {err.value}: {err.problem}") from None
    except pickle.UnpicklingError as err:
        text = _one_line(err)
        if "Weights only load failed" not in text:  # bytes that are no pickle at all
            reason = text[:200]
            raise CheckpointError(
                f"checkpoint {name}: unreadable, truncated or corrupt ({reason})"
            ) from None
        named = re.search(r"GLOBAL ([\w.]+)", text)
        if named:
            what = (
                f"holds objects other than tensors and plain data (it names {named[1].rstrip('.')})"
            )
        else:
            opcode = re.search(r"Unsupported operand (\d+)", text)
            code = f" (pickle opcode {opcode[1]})" if opcode else ""
            what = f"is no file of tensors and plain data{code}"
        raise CheckpointError(f"checkpoint {name}: {what}; refused without running it") from None
    except (FileNotFoundError, PermissionError, IsADirectoryError) as err:
        raise CheckpointError(
            f"checkpoint {name}: cannot be read ({err.strerror or err})"
        ) from None
    except Exception as err:  # noqa: BLE001 - torch on a foreign file raises about anything
        reason = f"{type(err).__name__}: {_one_line(err).split('. ')[0]}"[:200]
        raise CheckpointError(
            f"checkpoint {name}: unreadable, truncated or corrupt ({reason})"
        ) from None


def check_plain(value: Any, where: str = "payload") -> None:
    """Refuse (TypeError naming the field) a value :func:`load_tensor_file` would refuse to
    read back: anything but tensors, dicts, lists, tuples, strings, numbers, booleans, None."""
    if isinstance(value, _PLAIN):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            check_plain(key, f"{where} key")
            check_plain(item, f"{where}.{key}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_plain(item, f"{where}[{index}]")
        return
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise TypeError(
        f"{where} is a {kind}: a checkpoint holds tensors and plain data only "
        "(convert it, e.g. float(x) for a numpy scalar)"
    )


def _one_line(err: BaseException) -> str:
    return " ".join(_ANSI.sub("", str(err)).split())


__all__ = ["MAX_TENSOR_FILE_BYTES", "CheckpointError", "check_plain", "load_tensor_file"]
