"""Rollout packing helpers (``linc_core.problems.packing``), by hand and against torch."""

from __future__ import annotations

import torch

from linc_core.problems.packing import first_true, first_where


def test_first_true_is_each_rows_first_feasible_action() -> None:
    mask = torch.tensor(
        [
            [False, False, True, False],  # one feasible action: index 2
            [True, False, False, True],  # several: the first
            [False, False, False, False],  # none: 0, as argmax gives
            [False, False, False, True],  # the last node
        ]
    )
    found = first_true(mask)
    assert found.dtype == torch.int64
    assert found.tolist() == [2, 0, 0, 3]


def test_first_true_gives_argmax_values_on_random_masks() -> None:
    generator = torch.Generator().manual_seed(0)
    for n in (1, 2, 101, 1001):
        for density in (0.0, 0.01, 0.5, 1.0):
            mask = torch.rand(3, 7, n, generator=generator) < density
            expected = mask.to(torch.uint8).argmax(-1)
            assert torch.equal(first_true(mask), expected), (n, density)
            # the mask as 0/1 floats, as a compiled decision reads it
            assert torch.equal(first_true(mask.float()), expected), (n, density)


def test_first_where_puts_the_kept_columns_first_in_order() -> None:
    keep = torch.tensor([[False, True, False, True], [True, False, False, False]])
    assert first_where(keep, 2).tolist() == [[1, 3], [0, 1]]
