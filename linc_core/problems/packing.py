"""Rollout packing: work only on the rollouts that have a choice, beside the rollout engine.

Three CPU savings share one idea, "work only on the rows that matter": a rollout with at most
one feasible action has its action fixed and its log-probability exactly 0, so

- the choice rule (``linc_core.model.decisions``) runs the model only for the rollouts with a
  choice, packed per instance (:func:`first_where`);
- the LINC summary MLPs (``linc_core.model.scorer``) run only for those rows
  (:func:`choice_rows`, :func:`scatter_rows`);
- the training replay (``linc_core.model.replay``) recomputes only weighted, unforced
  decisions, packed per instance (:func:`first_where`).

None of it changes a probability: the tests compare packed and unpacked runs. On CUDA each
selection needs the host to read a count (a synchronisation per decision), which costs more
than the rows it saves, so :func:`prunes_rows` turns the savings off there; it turns them off
inside a ``torch.compile``d step too, whose graph reads nothing back from the device: a
compiled decoding step on CPU is handed the packed width and the rollouts' order, read before
it (``linc_core.model.decisions.decide_packed``).
"""

from __future__ import annotations

import torch
from torch import Tensor


def prunes_rows(device: torch.device) -> bool:
    """Whether leaving out the rollouts without a choice pays on ``device``.

    On CPU, computing fewer rows saves their time. On CUDA, the number of rows left is read on
    the host before the work can be sized, a host-device synchronisation at every decision
    that costs more than the rows it saves (the GPU works on all rows at once), so every row
    is computed there. Inside a compiled step (``torch.compiler.is_compiling()``, fixed when the
    step is traced) every row is computed too: selecting sizes a tensor from the data.
    """
    return device.type == "cpu" and not torch.compiler.is_compiling()


def choice_rows(feasible_count: Tensor) -> Tensor | None:
    """Flat indices of the rollouts with at least two feasible actions, or None when working on
    every rollout is cheaper than selecting them (at least 3 in 4 have a choice, or a device
    where selecting does not pay: ``prunes_rows``).

    Args:
        feasible_count: ``[B, K]`` feasible actions per rollout (depot included).
    """
    if not prunes_rows(feasible_count.device):
        return None
    has_choice = (feasible_count > 1).flatten()
    if 4 * int(has_choice.sum()) >= 3 * has_choice.numel():
        return None
    return has_choice.nonzero().squeeze(1)


def scatter_rows(values: Tensor, rows: Tensor, total: int, fill: float) -> Tensor:
    """``[R, C]`` values into rows ``rows`` of a ``[total, C]`` tensor filled with ``fill``."""
    out = values.new_full((total, values.shape[-1]), fill)
    return out.index_copy(0, rows, values)


def first_where(keep: Tensor, width: int) -> Tensor:
    """``[B, width]`` column positions of each row of ``keep`` ``[B, K]``: the True ones first,
    in their order, then the False ones (the padding of a row with fewer than ``width``)."""
    return torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :width]


def first_true(mask: Tensor) -> Tensor:
    """``[...]`` int64: the index of the first True (or non-zero, for a mask of 0/1 floats) of
    each row of ``mask`` ``[..., N]``, 0 in a row without one: the values of
    ``mask.to(torch.uint8).argmax(-1)`` (a forced rollout's one feasible action). A max over
    ``mask`` times the countdown N..1, because torch 2.13's CPU argmax over bytes is the slower
    kernel: 0.70 ms against 0.10 ms over [16, 128, 101]."""
    n = mask.shape[-1]
    countdown = torch.arange(n, 0, -1, dtype=torch.int32, device=mask.device)
    return (n - (mask * countdown).amax(-1)).remainder(n).long()


__all__ = ["choice_rows", "first_true", "first_where", "prunes_rows", "scatter_rows"]
