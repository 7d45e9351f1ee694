"""Keyed random draws (``linc_core.model.sampling``): permutations, z-vectors, row seeds."""

from __future__ import annotations

import collections

import pytest
import torch

from linc_core.model.sampling import (
    keyed_permutation,
    keyed_sampler,
    rollout_keys,
    row_seeds,
    sample_z,
)


@pytest.mark.parametrize("bits", [1, 2, 3, 5, 8, 11])
def test_keyed_permutation_is_a_permutation_for_every_seed(bits: int) -> None:
    seeds = row_seeds(4, 6)
    values = torch.arange(2**bits).expand(6, -1)
    permuted = keyed_permutation(values, bits, seeds)
    for row in permuted.tolist():
        assert sorted(row) == list(range(2**bits))
    assert len({tuple(row) for row in permuted.tolist()}) > 1 or bits == 1


def test_z_draws_are_uniform_over_vectors_and_ordered_pairs() -> None:
    """Over 24,000 seeds, z-vector 0 of a row is uniform over the 8 vectors of z_dim = 3 and
    the pair (z_0, z_1) uniform over the 56 ordered pairs: chi-square well below the 0.1%
    critical values (24.3 with 7 degrees of freedom, 93.2 with 55; fixed seeds, no flakiness)."""
    z = sample_z(row_seeds(99, 24_000), 2, 3)  # [R, 2, 3]
    index = (z * torch.tensor([4.0, 2.0, 1.0])).sum(-1).long()  # [R, 2]

    def chi_square(counts: collections.Counter, cells: list) -> float:
        expected = sum(counts.values()) / len(cells)
        return sum((counts.get(c, 0) - expected) ** 2 / expected for c in cells)

    first = collections.Counter(index[:, 0].tolist())
    pairs = collections.Counter(map(tuple, index.tolist()))
    ordered_pairs = [(a, b) for a in range(8) for b in range(8) if a != b]
    assert set(pairs) <= set(ordered_pairs)  # the two vectors of a row always differ
    assert chi_square(first, list(range(8))) < 24.3
    assert chi_square(pairs, ordered_pairs) < 93.2


def test_z_vectors_are_distinct_prefix_stable_and_per_row() -> None:
    seeds = row_seeds(5, 4)
    many = sample_z(seeds, 64, 16)
    few = sample_z(seeds, 8, 16)
    assert torch.equal(many[:, :8], few)
    for row in many:
        assert len({tuple(v.tolist()) for v in row}) == 64
    # a row's draw depends on its own seed only, not on the batch it is drawn in
    assert torch.equal(sample_z(seeds[2:3], 64, 16), many[2:3])
    with pytest.raises(ValueError, match="cannot draw 9 distinct z from 2\\^3"):
        sample_z(seeds, 9, 3)


def test_row_seeds_of_a_batch_slice_are_the_whole_batch_rows() -> None:
    """A data-parallel rank slices the whole batch's seeds: row b keeps its seed."""
    whole = row_seeds(1234, 8)
    assert torch.equal(whole[4:8], row_seeds(1234, 8)[4:8])
    assert len(set(whole.tolist())) == 8
    assert not torch.equal(row_seeds(1235, 8), whole)


def test_keyed_sampler_draws_follow_the_probabilities() -> None:
    """2,000 rows x 50 rollouts drawn from one [0.1, 0.2, 0.7] row: frequencies within 1%."""
    keys = rollout_keys(row_seeds(3, 2000), 0, 50)
    log_probs = torch.tensor([0.1, 0.2, 0.7]).log().expand(2000, 50, 3)
    drawn = keyed_sampler(keys)(log_probs, 4, None)
    frequencies = torch.bincount(drawn.flatten(), minlength=3).double() / drawn.numel()
    torch.testing.assert_close(
        frequencies, torch.tensor([0.1, 0.2, 0.7]).double(), atol=0.01, rtol=0
    )
