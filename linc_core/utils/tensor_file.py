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

Nor does a file get more memory than its size. Before torch reads it, its zip directory must list
stored (uncompressed) records that fit in the file, as ``torch.save`` writes them: a compressed
record could inflate a few MB into many GB, and torch's older, non-zip format names each
storage's size before its bytes, so a short file could ask for any. After it, every tensor must
be backed by its storage: a view with a stride of 0 (``zeros(1).expand(...)``) claims a
model's worth of values over one stored float, which the checks after loading would
materialise.
"""

from __future__ import annotations

import os
import pickle
import re
import warnings
import zipfile
from typing import IO, Any

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
            when torch reports it), or is missing, truncated, or no torch zip file, or holds
            records or tensors that claim more memory than it has bytes; or ``path`` is no
            regular file (a named pipe, a device) or one over ``MAX_TENSOR_FILE_BYTES``.
    """
    name = name or str(path)
    try:
        # a regular file only: a named pipe would block torch's open, /dev/zero fill memory
        opened = open_regular_file(path, max_bytes=MAX_TENSOR_FILE_BYTES, source=name)
        with opened as handle, warnings.catch_warnings():
            # torch's notes on a file's pickle protocol are not the user's business
            warnings.simplefilter("ignore")
            handle_size = _check_records(handle, name)
            payload = torch.load(handle, map_location=map_location, weights_only=True)
        _check_backed(payload, name, "payload", budget=handle_size)
        return payload
    except CheckpointError:
        raise
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


def _check_records(handle: IO[bytes], name: str) -> int:
    """Refuse a file that is no zip archive or whose records could inflate past its size;
    its size in bytes."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if handle.read(4) != b"PK\x03\x04":
        raise CheckpointError(
            f"checkpoint {name}: is no file of tensors and plain data (not the zip archive "
            "torch.save writes); refused without running it"
        )
    handle.seek(0)
    try:
        records = zipfile.ZipFile(handle).infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        handle.seek(0)
        return size  # torch reads its own directory and names the fault (truncated, say)
    listed = 0
    for record in records:
        listed += record.file_size
        stored = record.compress_type == zipfile.ZIP_STORED
        if not stored or record.file_size != record.compress_size or listed > size:
            raise CheckpointError(
                f"checkpoint {name}: its record {record.filename!r} ("
                f"{'stored' if stored else 'compressed'}, {record.compress_size} bytes in the "
                f"file, {record.file_size} read) could take more memory than the file's "
                f"{size} bytes; torch.save stores records uncompressed; refused unread"
            )
    handle.seek(0)
    return size


def _check_backed(value: Any, name: str, where: str, budget: int) -> None:
    """Refuse a tensor that claims more values than its storage holds (an expanded view), and
    a tree of more than ``budget`` entries (the file's size in bytes): every entry a pickle
    writes costs it a byte at least, unless the pickle shares a list or dict it wrote before,
    and ten lists each holding one ten times over, nested twelve deep, are 10**12 entries in
    1.9 KB that every walk of the payload would take days over."""
    pending, size = [(value, where)], budget
    while pending:
        value, where = pending.pop()
        budget -= 1
        if budget < 0:
            raise CheckpointError(
                f"checkpoint {name}: holds more entries than its {size} bytes can (at {where}): "
                "lists or dicts it holds many times over; refused"
            )
        if isinstance(value, torch.Tensor):
            claimed = value.numel() * value.element_size()
            held = value.untyped_storage().nbytes()
            if claimed > held:
                raise CheckpointError(
                    f"checkpoint {name}: {where} claims {value.numel()} values of shape "
                    f"{tuple(value.shape)} over a storage of {held} bytes (a view that "
                    "repeats them); refused"
                )
        elif isinstance(value, dict):
            pending.extend((item, f"{where}.{key}") for key, item in value.items())
        elif isinstance(value, list | tuple):
            pending.extend((item, f"{where}[{index}]") for index, item in enumerate(value))


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
