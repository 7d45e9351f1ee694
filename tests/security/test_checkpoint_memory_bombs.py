"""A small checkpoint cannot make its reader take more memory than the file has bytes.

Two ways a writer of shared storage could take down whoever loads a checkpoint (``linc-eval``,
``linc-train --resume``, a resuming trial, the served model) with a file of a few KB: records
compressed in its zip archive that inflate as torch reads them, and tensors saved as views that
repeat one stored value (a stride of 0) in the shapes a huge model's config asks for, which the
checks after loading and the model built from the config then materialise. Each test shows the
trap first (torch alone loads it, the memory claimed), so that it can fail.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest
import torch

from linc_core.config import ModelConfig
from linc_core.model import LincPolicy
from linc_core.train.checkpoint import CheckpointError
from linc_core.train.loop import policy_from_checkpoint
from linc_core.utils.tensor_file import load_tensor_file
from tests.conftest import tiny_checkpoint


def recompressed(path: Path, payload: dict) -> Path:
    """``payload`` as torch.save writes it, its records then deflated: a zip bomb's form."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as target:
        for record in source.infolist():
            target.writestr(record.filename, source.read(record.filename))
    return path


def test_a_record_that_inflates_is_refused_unread(tmp_path) -> None:
    path = recompressed(tmp_path / "bomb.pt", {"model_state": {"w": torch.zeros(2**22)}})
    inflated = 4 * 2**22
    assert path.stat().st_size < inflated // 100  # about 16 KB on disk for 16 MiB
    assert torch.load(path, weights_only=True)["model_state"]["w"].numel() == 2**22  # the trap
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(path)
    assert re.fullmatch(
        rf"checkpoint {re.escape(str(path))}: its record 'archive/data\.pkl' \(compressed, \d+ "
        rf"bytes in the file, \d+ read\) could take more memory than the file's "
        rf"{path.stat().st_size} bytes; torch.save stores records uncompressed; refused unread",
        str(refused.value),
    ), refused.value


def test_torch_s_older_format_is_refused(tmp_path) -> None:
    # Its pickle names each storage's size before the bytes: a short file could ask for any.
    path = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(3)}, path, _use_new_zipfile_serialization=False)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(3))
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(path)
    assert str(refused.value) == (
        f"checkpoint {path}: is no file of tensors and plain data (not the zip archive "
        "torch.save writes); refused without running it"
    )


def test_a_view_that_repeats_one_value_is_refused(tmp_path) -> None:
    path = tmp_path / "expanded.pt"
    torch.save({"model_state": {"w": torch.zeros(1).expand(3000, 4000)}}, path)
    assert path.stat().st_size < 4096
    loaded = torch.load(path, weights_only=True)["model_state"]["w"]
    assert loaded.shape == (3000, 4000) and loaded.stride() == (0, 0)  # the trap
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(path)
    assert str(refused.value) == (
        f"checkpoint {path}: payload.model_state.w claims 12000000 values of shape (3000, 4000) "
        "over a storage of 4 bytes (a view that repeats them); refused"
    )


def test_views_that_share_a_storage_still_load(tmp_path) -> None:
    whole = torch.arange(12.0)
    path = tmp_path / "views.pt"
    torch.save(
        {"whole": whole, "rows": whole.view(3, 4)[1:], "column": whole.view(3, 4)[:, 2]}, path
    )
    loaded = load_tensor_file(path)
    assert torch.equal(loaded["rows"], whole.view(3, 4)[1:])
    assert torch.equal(loaded["column"], torch.tensor([2.0, 6.0, 10.0]))


def test_a_huge_model_s_config_over_repeated_views_is_refused_before_it_is_built(tmp_path) -> None:
    # The checkpoint's config asks for a 1024-wide model (17M float32 weights, 68 MB; a wider
    # one asks for any); its state has exactly those shapes, each a view of one stored float.
    path = tiny_checkpoint(tmp_path / "latest.pt")
    payload = torch.load(path, weights_only=True)
    config = dict(payload["model_config"], embedding_dim=1024, ff_hidden_dim=4096)
    with torch.device("meta"):
        shapes = LincPolicy(ModelConfig(**config)).state_dict()
    one = torch.zeros(1)
    payload["model_config"] = config
    payload["model_state"] = {k: one.expand(v.shape) for k, v in shapes.items()}
    bomb = tmp_path / "bomb.pt"
    torch.save(payload, bomb)
    assert bomb.stat().st_size < 10**6
    assert sum(v.numel() for v in shapes.values()) > 1.6e7
    with pytest.raises(CheckpointError, match=r"^checkpoint .*bomb\.pt: payload\.model_state\."):
        policy_from_checkpoint(str(bomb))


def test_lists_held_many_times_over_are_refused_before_any_walk(tmp_path) -> None:
    """Ten lists, each holding the one below ten times (the pickle shares it), twelve deep:
    10**12 entries in under 2 KB. Walking them (the view check, the checkpoint's fields) took
    12 s at seven deep and would take days at twelve."""
    nested: list = [torch.zeros(1)]
    for _ in range(12):
        nested = [nested] * 10
    path = tmp_path / "shared.pt"
    torch.save({"model_state": nested}, path)
    size = path.stat().st_size
    assert size < 2048
    with pytest.raises(CheckpointError) as refused:
        load_tensor_file(path)
    said = str(refused.value)
    assert said.startswith(f"checkpoint {path}: holds more entries than its {size} bytes can")
    assert "(at payload.model_state[9]" in said and said.endswith("many times over; refused")
    with pytest.raises(CheckpointError, match="many times over"):
        policy_from_checkpoint(path)  # every loader reads through it


def test_a_real_training_checkpoint_fits_its_entry_budget(tmp_path) -> None:
    """Each entry a pickle writes costs it a byte at least: a checkpoint with its optimizer's
    state and history loads under the budget, with room to spare."""
    path = tiny_checkpoint(tmp_path / "real.pt")
    payload = load_tensor_file(path)
    entries, pending = 0, [payload]
    while pending:
        value = pending.pop()
        entries += 1
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
    assert 0 < entries * 4 < path.stat().st_size
