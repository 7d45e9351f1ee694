"""The memory estimate a scheduler reserves per run: its decoding term is one chunk's."""

from __future__ import annotations

import pytest

from linc_core.decoding.config import ROLLOUTS_PER_CHUNK
from linc_core.runs.memory import DECODE_INSTANCE, DECODE_ROW, _decode_bytes


def test_a_decoding_holds_one_chunk_of_rows_and_rollouts() -> None:
    """The 56 Solomon-100 at z=800 x8 on CPU: 448 rows of 800 rollouts, decoded 20 rows
    (16,000 rollouts) at a time, by hand."""
    chunk = ROLLOUTS_PER_CHUNK["cpu"]
    assert chunk == 16384
    expected = DECODE_INSTANCE * 20 * 101 * 101 * 128 + DECODE_ROW * 20 * 800 * 101 * 128
    assert _decode_bytes(448, 800, chunk, 101, 128) == pytest.approx(expected, rel=1e-12)
    assert _decode_bytes(448, 800, chunk, 101, 128) == _decode_bytes(20, 800, chunk, 101, 128)
    assert _decode_bytes(5, 800, chunk, 101, 128) == pytest.approx(
        DECODE_INSTANCE * 5 * 101 * 101 * 128 + DECODE_ROW * 5 * 800 * 101 * 128, rel=1e-12
    )


def test_rollouts_past_a_chunk_are_decoded_in_blocks_of_one_row() -> None:
    """K larger than the chunk: one row at a time, ``chunk`` rollouts of it (best_of_k's
    blocks); a larger chunk (CUDA's) holds more."""
    cpu = ROLLOUTS_PER_CHUNK["cpu"]
    one_row = DECODE_INSTANCE * 51 * 51 * 128 + DECODE_ROW * cpu * 51 * 128
    assert _decode_bytes(64, 100_000, cpu, 51, 128) == pytest.approx(one_row, rel=1e-12)
    cuda = ROLLOUTS_PER_CHUNK["cuda"]
    assert _decode_bytes(448, 800, cuda, 101, 128) > _decode_bytes(448, 800, cpu, 101, 128)
