"""``torch.compile`` of the decoding and training steps: the one place that says how.

The decoding step (the choice rule's scoring and sampling, and the environment's transition)
and the training replay's differentiable pass are pure tensor code that dynamo takes whole
(``fullgraph=True``): no ``out=`` writes into views, no host reads, no branch on a tensor's
value. The eager path's CPU savings (``linc_core.problems.packing``: rollouts without a choice
left out) size tensors from the data, so their sizing stays outside: ``prunes_rows`` is False
while a step is traced, the packed width is read before the graph, and the graph selects the
rollouts it is told (``linc_core.model.decisions.decide_packed``).

How a step is compiled, per device:

- CPU: inductor, its default mode (fused C++ loops around the GEMMs);
- CUDA: ``mode="reduce-overhead"`` (CUDA graphs: one launch per step instead of one per kernel)
  for the decoding step, whose shapes are fixed for a whole rollout batch; its outputs are
  copied out of the graph's memory before the next replay, since the rollout loop keeps the
  states it is handed. The training replay's shapes change from step to step (the packed
  decisions), so it runs inductor's default mode there (a graph per shape would be recorded).

A compiled step costs its compile time once per shape (and per process): see docs/how-to/gpu.md,
"Compiled steps", for the measured figures.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")


def uses_cuda_graphs(device: torch.device) -> bool:
    """Whether a compiled decoding step on ``device`` runs as CUDA graphs."""
    return device.type == "cuda"


def _copied(value: Any) -> Any:
    """``value`` with every tensor in it cloned (tensors, tuples, dataclasses such as states)."""
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, tuple):
        items = [_copied(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _copied(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **changes)
    return value


# How a compiled step on CPU is handed a feasibility mask: as 0/1 floats, turned back into a bool
# mask inside the graph (``read_mask_values``). torch 2.13's inductor reads bool and byte tensors
# in its vectorised loops through a generic mask path; measured on one decision of 2048 rollouts
# (full_linc, CVRPTW n=100): the feasible-set statistics' loop 2.45 ms from bytes, 0.39 ms from
# floats; the attention mask 0.64 ms, 0.04 ms; the whole decision 19.3 ms, 16.2 ms (eager 22.7).
MASK_VALUES_DTYPE = torch.float32


def mask_values(mask: Tensor) -> Tensor:
    """A bool ``mask`` as 0/1 floats, what a compiled step reads (``MASK_VALUES_DTYPE``)."""
    return mask.to(MASK_VALUES_DTYPE)


def read_mask_values(state: S, values: Tensor | None) -> S:
    """``state`` (a dataclass with a ``mask``) with the mask ``values != 0`` (None: as it is)."""
    if values is None:
        return state
    return dataclasses.replace(state, mask=values != 0)  # type: ignore[type-var]


# Inductor's CPU code for a step of mostly boolean work (the environment's masks): scalar loops.
# torch 2.13 loads and stores bool tensors in its vectorised loops through a generic 64-lane
# path that costs about 10x a scalar loop (measured: ``~mask`` over [16, 128, 101] 2.6 ms
# vectorised, 0.23 ms scalar, 0.02 ms eager), so a CVRPTW transition compiled vectorised took
# 7.2 ms against 0.75 ms eager, and 0.66 ms in scalar loops.
SCALAR_LOOPS = {"cpp.simdlen": 0}


# Graphs kept per compiled step (dynamo's ``recompile_limit``, 8 by default). Each model variant,
# dtype, problem, autograd mode and packed/dense call is a graph of its own: a process that
# decodes several models (a sweep's evaluations, the tests) passes 8 soon, and with
# ``fullgraph=True`` passing it is an error, not a fallback to eager.
GRAPHS_PER_STEP = 64


@functools.cache
def _compiled(
    fn: Callable, device_type: str, dynamic: bool | None, graphs: bool, vectorise: bool
) -> Callable:
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, GRAPHS_PER_STEP)
    mode = "reduce-overhead" if graphs else None
    options = None if vectorise or device_type != "cpu" else dict(SCALAR_LOOPS)
    if options is not None:  # torch.compile takes either a mode or options
        return torch.compile(fn, fullgraph=True, dynamic=dynamic, options=options)
    return torch.compile(fn, fullgraph=True, dynamic=dynamic, mode=mode)


def compile_step(
    fn: F,
    device: torch.device,
    *,
    dynamic: bool | None = False,
    cuda_graphs: bool = True,
    vectorise: bool = True,
) -> F:
    """``fn`` compiled whole for ``device`` (module docstring), shared by every caller.

    The compiled function is cached per (``fn``, device type): dynamo's own cache then holds one
    graph per shape and guard set, so a new environment or chooser of a known shape reuses it.

    Args:
        fn: a plain function (not a bound method: its ``self`` would key the cache).
        dynamic: ``torch.compile``'s: False specialises every shape (the decoding step: a
            rollout batch keeps its shapes), None lets a dimension that changed go symbolic
            (packed decisions: the replay's, and a decoding step's on CPU).
        cuda_graphs: run as CUDA graphs on CUDA (``uses_cuda_graphs``); the outputs are copied.
        vectorise: False for a step of mostly boolean work on CPU (``SCALAR_LOOPS``).
    """
    graphs = cuda_graphs and uses_cuda_graphs(device)
    compiled = _compiled(fn, device.type, dynamic, graphs, vectorise)
    if not graphs:
        return compiled  # type: ignore[return-value]

    @functools.wraps(fn)
    def replay(*args: Any, **kwargs: Any) -> Any:
        # A new step each call: the previous replay's outputs were copied out, so the graphs'
        # memory may be reused (one recorded graph per shape, not one per decision).
        torch.compiler.cudagraph_mark_step_begin()
        return _copied(compiled(*args, **kwargs))

    return replay  # type: ignore[return-value]


__all__ = ["compile_step", "mask_values", "read_mask_values", "uses_cuda_graphs"]
