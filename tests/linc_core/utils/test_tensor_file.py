"""``load_tensor_file``: tensors and plain data load, anything else is one refused line; the
writer saves nothing the reader would refuse (``check_plain``)."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict

import numpy as np
import pytest
import torch

from linc_core.train.checkpoint import save_checkpoint
from linc_core.utils.tensor_file import (
    MAX_TENSOR_FILE_BYTES,
    CheckpointError,
    check_plain,
    load_tensor_file,
)
from tests.conftest import refusals_in_fresh_process
from tests.golden import REFERENCE_STATE_DICT, golden_path


class _Trap:
    def __reduce__(self):
        return (os.system, ("true",))


def test_tensors_and_plain_data_load_as_saved(tmp_path) -> None:
    state = OrderedDict(weight=torch.arange(6.0).reshape(2, 3), bias=torch.zeros(2))
    payload = {
        "model_state": state,
        "optimizer_state": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{}]},
        "history": [{"epoch": 1, "loss": 0.5, "note": None, "best_only": True}],
        "shape": torch.Size([2, 3]),
        "dtype": torch.float16,
        "betas": (0.9, 0.999),
        "raw": b"bytes",
    }
    check_plain(payload)
    torch.save(payload, tmp_path / "plain.pt")
    loaded = load_tensor_file(tmp_path / "plain.pt")
    assert torch.equal(loaded["model_state"]["weight"], state["weight"])
    assert loaded["history"] == payload["history"] and loaded["betas"] == (0.9, 0.999)
    assert loaded["shape"] == torch.Size([2, 3]) and loaded["dtype"] is torch.float16


def test_the_reference_state_dict_loads() -> None:
    path = golden_path(REFERENCE_STATE_DICT)
    loaded = load_tensor_file(path)
    expected = torch.load(path, weights_only=True)
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)


@pytest.mark.parametrize(
    ("content", "told"),
    [
        (
            lambda path: torch.save({"model_state": _Trap()}, path),
            "holds objects other than tensors and plain data (it names posix.system); "
            "refused without running it",
        ),
        (
            lambda path: torch.save({"history": [{"loss": np.float64(0.5)}]}, path),
            "holds objects other than tensors and plain data (it names "
            "numpy._core.multiarray.scalar); refused without running it",
        ),
        (
            lambda path: path.write_bytes(b"\x00not a torch file" * 10),
            "is no file of tensors and plain data (not the zip archive torch.save writes); "
            "refused without running it",
        ),
        (
            lambda path: path.write_bytes(b"PK\x03\x04 a zip cut short"),
            "unreadable, truncated or corrupt (RuntimeError: PytorchStreamReader failed reading "
            "zip archive: not a ZIP archive)",
        ),
        (lambda path: None, "cannot be read (No such file or directory)"),
    ],
    ids=["global", "numpy-scalar", "garbage", "foreign-zip", "missing"],
)
def test_anything_else_is_one_line_naming_the_file(content, told, tmp_path) -> None:
    path = tmp_path / "file.pt"
    content(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's notes about pickle protocols stay quiet
        with pytest.raises(CheckpointError) as refused:
            load_tensor_file(path, name="s3://bucket/file.pt")
    assert str(refused.value) == f"checkpoint s3://bucket/file.pt: {told}"


def test_the_writer_refuses_what_the_reader_would(tmp_path) -> None:
    payload = {"format_version": 1, "history": [{"epoch": 1, "loss": np.float32(0.5)}]}
    with pytest.raises(TypeError, match=r"^checkpoint\.history\[0\]\.loss is a numpy\.float32"):
        save_checkpoint(tmp_path / "latest.pt", payload)
    assert not list(tmp_path.iterdir())  # nothing written
    with pytest.raises(TypeError, match=r"^payload\.model is a .*_Trap"):
        check_plain({"model": _Trap()})


def test_a_fifo_or_a_device_is_refused_at_once_and_unread(tmp_path) -> None:
    # A FIFO blocks torch's open until a writer comes, /dev/zero would be read until memory
    # runs out: each load runs in a process of its own with a deadline and a memory limit.
    fifo, zero = tmp_path / "fifo.pt", tmp_path / "zero.pt"
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    refusals = refusals_in_fresh_process(
        "from linc_core.utils.tensor_file import CheckpointError, load_tensor_file",
        [f"load_tensor_file({str(path)!r})" for path in (fifo, zero)],
        "CheckpointError",
    )
    assert [message for _, message in refusals] == [
        f"checkpoint {fifo}: a named pipe (FIFO): expected a regular file",
        f"checkpoint {zero}: a device: expected a regular file",
    ]
    assert all(seconds < 1.0 for seconds, _ in refusals), refusals


def test_a_folder_or_a_file_over_the_cap_is_refused_by_what_it_is(tmp_path) -> None:
    big = tmp_path / "big.pt"
    with open(big, "wb") as out:
        out.truncate(MAX_TENSOR_FILE_BYTES + 1)  # sparse: 2 GiB on paper, nothing on disk
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(big)
    assert str(refused.value) == (
        f"checkpoint {big}: 2 GiB: larger than the 2 GiB this reader accepts"
    )
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(tmp_path, name="run/latest.pt")
    assert str(refused.value) == "checkpoint run/latest.pt: a folder: expected a regular file"


def test_a_link_to_a_real_checkpoint_loads(tmp_path) -> None:
    link = tmp_path / "link.pt"
    link.symlink_to(golden_path(REFERENCE_STATE_DICT))
    assert (
        load_tensor_file(link).keys() == load_tensor_file(golden_path(REFERENCE_STATE_DICT)).keys()
    )
