"""Training data sources: the sharded Parquet stream (``ShardedTrainingData``)."""

from __future__ import annotations

from pathlib import Path

from linc_core.instances import Instance
from linc_core.train.data import ShardedTrainingData
from tests.linc_core.instances.test_parquet import assert_bit_identical, named_shards, write_set


def test_training_stream_is_pure_shuffled_and_complete(tmp_path: Path) -> None:
    shards = named_shards([8, 8, 8, 6])
    write_set(tmp_path / "set", shards)
    data = ShardedTrainingData(str(tmp_path / "set"), batch_size=5, seed=7)
    assert data.batches_per_epoch == 30 // 5
    epoch0 = [data.batch(0, i).names for i in range(data.batches_per_epoch)]
    seen = [name for names in epoch0 for name in names]
    assert sorted(seen) == sorted(f"row{k}" for k in range(30))  # each instance once
    assert seen != [f"row{k}" for k in range(30)]  # shuffled
    assert len(data._cache) <= 2  # bounded memory
    # Pure: a fresh reader, batches in another order, gives the same batches.
    fresh = ShardedTrainingData(str(tmp_path / "set"), batch_size=5, seed=7)
    assert [fresh.batch(0, i).names for i in reversed(range(6))] == epoch0[::-1]
    assert [data.batch(1, i).names for i in range(6)] != epoch0  # reshuffled per epoch
    # The rows are the stored instances, bit for bit.
    everything = Instance.concat(shards)
    batch = data.batch(0, 2)
    rows = [int(name[3:]) for name in batch.names]
    assert_bit_identical(batch, everything.select(rows))


def test_training_stream_without_shuffle_keeps_order(tmp_path: Path) -> None:
    write_set(tmp_path / "set", named_shards([4, 4]), manifest=False)
    data = ShardedTrainingData(str(tmp_path / "set"), batch_size=3, seed=0, shuffle=False)
    assert data.batch(0, 1).names == ("row3", "row4", "row5")
