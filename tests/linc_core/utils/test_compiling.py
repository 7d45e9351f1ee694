"""How a step is compiled (``linc_core.utils.compiling``): one compiled function per step and
device kind, shared by every caller, whose CUDA-graph outputs are copies."""

from __future__ import annotations

import dataclasses

import torch

from linc_core.problems.protocol import RolloutState
from linc_core.utils.compiling import _copied, compile_step, uses_cuda_graphs


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
