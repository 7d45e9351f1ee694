"""``checkpoint_in_storage``: what registration takes as "under the sweep's own storage".

Paths are compared normalised (``..`` resolved, symlinks followed), URIs by scheme, bucket and
path (userinfo and query ignored: a password masked as ``***`` in the logged storage matches).
The whole registration is attacked in ``tests/security/test_untrusted_checkpoints.py``.
"""

from __future__ import annotations

import pytest

from linc_core.train.checkpoint import CheckpointError
from orchestration.tracking.registry import checkpoint_in_storage


def test_a_local_checkpoint_under_the_storage_is_taken_normalised(tmp_path) -> None:
    storage = tmp_path / "runs"
    inside = storage / "sweep" / "trial" / "checkpoint_000001" / "latest.pt"
    assert checkpoint_in_storage(str(inside), str(storage)) == str(inside)
    dotted = f"{storage}/sweep/./trial/../trial/checkpoint_000001/latest.pt"
    assert checkpoint_in_storage(dotted, f"{storage}/") == str(inside)


@pytest.mark.parametrize(
    "where",
    ["{tmp}/elsewhere/latest.pt", "{tmp}/runs/../elsewhere/latest.pt", "{tmp}/runs2/latest.pt",
     "{tmp}/runs", "s3://bucket/{tmp}/runs/latest.pt"],
)  # fmt: skip
def test_a_local_checkpoint_elsewhere_is_refused(where, tmp_path) -> None:
    checkpoint = where.format(tmp=tmp_path)
    with pytest.raises(CheckpointError, match="outside its sweep's storage") as refused:
        checkpoint_in_storage(checkpoint, str(tmp_path / "runs"))
    assert str(refused.value).startswith(f"checkpoint {checkpoint}: ")


def test_a_symlink_out_of_the_storage_is_refused(tmp_path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "runs" / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(CheckpointError, match="outside its sweep's storage"):
        checkpoint_in_storage(str(tmp_path / "runs" / "link" / "latest.pt"), str(tmp_path / "runs"))


def test_s3_compares_bucket_and_path_ignoring_userinfo_and_query() -> None:
    storage = "s3://key:***@bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http"
    checkpoint = "s3://bucket/runs/sweep/trial/checkpoint_000002/latest.pt"
    assert checkpoint_in_storage(checkpoint, storage) == checkpoint
    dotted = "s3://bucket/runs/sweep/../sweep/trial/latest.pt?scheme=http"
    assert (
        checkpoint_in_storage(dotted, storage)
        == "s3://bucket/runs/sweep/trial/latest.pt?scheme=http"
    )
    for elsewhere in (
        "s3://other/runs/sweep/latest.pt",
        "s3://bucket/runs/../private/latest.pt",
        "s3://bucket/runs-old/latest.pt",
        "gs://bucket/runs/latest.pt",
        "/bucket/runs/latest.pt",
    ):
        with pytest.raises(CheckpointError, match=rf"^checkpoint {elsewhere}: outside"):
            checkpoint_in_storage(elsewhere, storage)
