"""How a step is compiled (``linc_core.utils.compiling``): one compiled function per step and
device kind, shared by every caller, whose CUDA-graph outputs are copies."""

from __future__ import annotations

import dataclasses

import torch

from linc_core.problems.protocol import RolloutState
from linc_core.utils.compiling import (
    _copied,
    compile_step,
    mask_values,
    read_mask_values,
    uses_cuda_graphs,
)


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_step_is_compiled_once_per_device_kind_and_shared() -> None:
    cpu = torch.device("cpu")
    first = compile_step(_double, cpu)
    assert compile_step(_double, cpu) is first
    assert compile_step(_double, cpu, vectorise=False) is not first  # its own inductor options
    assert torch.equal(first(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))
    assert not uses_cuda_graphs(cpu) and uses_cuda_graphs(torch.device("cuda", 0))


def test_outputs_kept_from_a_graph_replay_are_copies() -> None:
    """What the rollout loop keeps of a CUDA-graph replay (states, tuples of tensors) is copied
    out of the graph's memory, which the next replay overwrites."""
    state = RolloutState(
        current=torch.zeros(1, 2, dtype=torch.long),
        mask=torch.ones(1, 2, 3, dtype=torch.bool),
        finished=torch.zeros(1, 2, dtype=torch.bool),
        length=torch.zeros(1, 2),
    )
    copied, number, none = _copied((state, 3, None))
    assert (number, none) == (3, None)
    for field in dataclasses.fields(state):
        original, copy = getattr(state, field.name), getattr(copied, field.name)
        assert torch.equal(copy, original) and copy.data_ptr() != original.data_ptr()


def test_a_mask_read_as_floats_is_the_same_mask() -> None:
    """A compiled step is handed the mask as 0/1 floats and reads back exactly the bools."""
    mask = torch.tensor([[[True, False, True], [False, False, True]]])
    state = RolloutState(
        current=torch.zeros(1, 2, dtype=torch.long),
        mask=mask,
        finished=torch.zeros(1, 2, dtype=torch.bool),
        length=torch.zeros(1, 2),
    )
    values = mask_values(mask)
    assert values.dtype == torch.float32
    assert values.tolist() == [[[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]]
    read = read_mask_values(state, values)
    assert read.mask.dtype == torch.bool and torch.equal(read.mask, mask)
    assert read.current is state.current
    assert read_mask_values(state, None) is state
