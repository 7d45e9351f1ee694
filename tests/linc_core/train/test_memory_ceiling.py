"""The heap ceiling of a training run: when it trims, and that trimming changes no result."""

from __future__ import annotations

import sys

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.train import GeneratedData, fit
from linc_core.train.memory_ceiling import HeapCeiling, heap_ceiling
from tests.conftest import tiny_configs

MiB = 1 << 20


def test_the_ceiling_is_the_limit_less_one_steps_working_memory() -> None:
    """1 GiB allowed, a run estimated at 600 MiB by a process of 250 MiB: 350 MiB of working
    memory, so the process may hold 674 MiB between steps; never less than it holds now."""
    assert heap_ceiling(1024 * MiB, 600 * MiB, 250 * MiB) == 674 * MiB
    assert heap_ceiling(500 * MiB, 600 * MiB, 250 * MiB) == 250 * MiB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_a_run_above_its_ceiling_is_trimmed_after_every_step_to_the_same_weights() -> None:
    model, config = tiny_configs(
        "full_linc", num_rollouts=4, batch_size=4, instances_per_epoch=8, epochs=3
    )
    data = GeneratedData("cvrptw", 6, 4, 8, seed=3)

    def run(callbacks: list) -> LincPolicy:
        torch.manual_seed(0)
        return fit(LincPolicy(model), config, data, callbacks=callbacks).policy

    below, above = HeapCeiling(1 << 50), HeapCeiling(0)
    plain, untouched, trimmed = run([]), run([below]), run([above])
    assert (below.trims, above.trims) == (0, 6)  # 3 epochs of 2 steps
    for name, weights in plain.state_dict().items():
        assert torch.equal(weights, untouched.state_dict()[name]), name
        assert torch.equal(weights, trimmed.state_dict()[name]), name
