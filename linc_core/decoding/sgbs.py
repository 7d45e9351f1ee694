"""Simulation-guided beam search (SGBS, Choo et al. 2022) as the LINC reference runs it.

Per row (one augmented copy of one instance), reference section 6:

1. ``sgbs_z`` greedy rollouts, one per z-vector (a model without z: one per POMO start).
   The best of them is the incumbent; the ``beam_width`` best become the beams, each placed
   after its first decision, with its z and its greedy completion cost.
2. At every depth each beam proposes its ``expansion`` most likely children. The greedy child's
   greedy completion is the beam's own rollout, whose cost is known, so only the other
   ``expansion - 1`` children are simulated (greedy completion).
3. The ``beam_width`` children with the cheapest completions become the new beams; every
   simulated completion is offered to the incumbent.
4. Stop when every beam has finished; the answer is the incumbent.

The incumbent starts as the best greedy rollout of step 1 and only ever improves, so SGBS is
never worse than its own greedy start. All of it runs on ``[R, beams, ...]`` tensors.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from linc_core.decoding.best_of_k import (
    BestRollouts,
    Rows,
    rollout_capacity,
    trim_between_chunks,
)
from linc_core.decoding.config import sgbs_chunk
from linc_core.decoding.deadline import check_deadline, with_deadline
from linc_core.model.decisions import PolicyChooser
from linc_core.model.policy import LincPolicy
from linc_core.model.sampling import greedy
from linc_core.model.types import Encoded
from linc_core.problems import make_env
from linc_core.problems.protocol import RolloutState, RoutingEnv
from linc_core.problems.rollout import complete_rollouts, pomo_starts, start_rollouts


def _gather(values: Tensor, index: Tensor) -> Tensor:
    """``values[r, index[r, j]]`` for ``values`` ``[R, K, ...]`` and ``index`` ``[R, J]``."""
    rows = torch.arange(index.shape[0], device=index.device).unsqueeze(1)
    return values[rows, index]


def _pad_cat(a: Tensor, b: Tensor) -> Tensor:
    """Concatenate ``[R, K, Ta]`` and ``[R, K, Tb]`` along T."""
    return torch.cat([a, b], dim=-1)


def sgbs_rows(
    policy: LincPolicy,
    rows: Rows,
    *,
    beam_width: int,
    expansion: int,
    initial_rollouts: int,
    seed: int,
    max_rollouts_per_chunk: int,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = None,
    compiled: bool = False,
) -> tuple[BestRollouts, Tensor]:
    """SGBS on every row, rows chunked so that at most ``max_rollouts_per_chunk`` rollouts
    (initial rollouts or simulations) run at once, the heap trimmed between chunks on CPU
    (``trim_between_chunks``); ``compiled``: the greedy completions'
    decision step under ``torch.compile`` (two shapes: the initial rollouts, the simulations).

    Returns:
        (the incumbent per row, ``[R]`` float64 cost of the best initial greedy rollout).
    """
    device = rows.instance.device
    incumbent = BestRollouts.empty(rows.count, rollout_capacity(rows.instance), device)
    greedy_start = torch.full((rows.count,), float("inf"), dtype=torch.float64, device=device)
    rows_per_chunk, _, initial_rollouts, expansion = sgbs_chunk(
        initial_rollouts,
        beam_width,
        expansion,
        rows.instance.num_customers,
        rows.instance.num_nodes,
        policy.config.z_dim,
        max_rollouts_per_chunk,
    )
    for first in range(0, rows.count, rows_per_chunk):
        if first > 0:
            trim_between_chunks(device)  # the last chunk's beams are freed: its heap too
        chunk = rows.select(slice(first, first + rows_per_chunk))
        start_cost = _sgbs_chunk(
            policy,
            chunk,
            first,
            incumbent,
            beam_width=min(beam_width, initial_rollouts),
            expansion=expansion,
            initial_rollouts=initial_rollouts,
            seed=seed,
            progress=progress,
            deadline=deadline,
            compiled=compiled,
        )
        greedy_start[first : first + chunk.count] = start_cost
    return incumbent, greedy_start


def _greedy_completion(
    policy: LincPolicy,
    env: RoutingEnv,
    encoded: Encoded,
    state: RolloutState,
    z: Tensor | None,
    deadline: float | None,
    compiled: bool,
) -> tuple[RolloutState, Tensor]:
    """Greedy completion of every rollout of ``state`` (a simulation)."""
    chooser = PolicyChooser(
        policy, env, encoded, z, greedy, track_log_likelihood=False, compiled=compiled
    )
    choose = with_deadline(chooser, deadline)
    return complete_rollouts(env, choose, state, transition=chooser.transition)


def _sgbs_chunk(
    policy: LincPolicy,
    rows: Rows,
    first_row: int,
    incumbent: BestRollouts,
    *,
    beam_width: int,
    expansion: int,
    initial_rollouts: int,
    seed: int,
    progress: Callable[[int], None] | None,
    deadline: float | None,
    compiled: bool,
) -> Tensor:
    instance = rows.instance
    r = rows.count
    z_dim = policy.config.z_dim
    encoded = policy.encode(instance)
    # The environment's K sizes only its reset; it steps states of any width.
    env = make_env(instance, initial_rollouts)

    # 1. greedy rollouts from the root, one per z (or per start)
    z_all = rows.z(initial_rollouts, z_dim, seed) if z_dim > 0 else None
    starts = pomo_starts(instance, initial_rollouts) if z_dim == 0 else None
    root, prefix = start_rollouts(env, starts)
    final, actions = _greedy_completion(policy, env, encoded, root, z_all, deadline, compiled)
    incumbent.offer(first_row, final.cost, _pad_cat(prefix, actions))
    if progress is not None:
        progress(r * initial_rollouts)
    start_cost = final.cost.double().min(-1).values

    order = final.cost.argsort(-1)[:, :beam_width]  # [R, W]
    beam_state = root.select(order)
    beam_prefix = _gather(prefix, order)
    beam_z = _gather(z_all, order) if z_all is not None else None
    if actions.shape[-1] > 0:  # place every beam after its first greedy decision
        first_action = _gather(actions[..., 0], order)
        beam_state = env.step(beam_state, first_action)
        beam_prefix = _pad_cat(beam_prefix, first_action.unsqueeze(-1))
    beam_cost = _gather(final.cost, order)  # [R, W] greedy completion cost of each beam

    others = expansion - 1
    rows_index = torch.arange(r, device=instance.device).unsqueeze(1)
    for _ in range(env.max_steps + 1):
        if bool(beam_state.finished.all()):
            break
        check_deadline(deadline)
        w = beam_state.current.shape[1]
        beam_chooser = PolicyChooser(
            policy, env, encoded, beam_z, greedy, track_log_likelihood=False
        )
        _, log_probs, _ = beam_chooser.evaluate(beam_state)  # [R, W, N]
        top_logp, top_action = log_probs.topk(expansion, dim=-1)  # [R, W, E]
        greedy_action = top_action[..., 0]
        # Children beyond the feasible actions are invalid; they replay the greedy action so
        # the environment only ever sees feasible moves, and are scored +inf.
        valid = torch.isfinite(top_logp[..., 1:])  # [R, W, E-1]
        child_action = torch.where(valid, top_action[..., 1:], greedy_action.unsqueeze(-1))
        child_state = env.step(beam_state.repeat(others), child_action.flatten(1))
        child_z = beam_z.repeat_interleave(others, dim=1) if beam_z is not None else None
        simulated, completion = _greedy_completion(
            policy, env, encoded, child_state, child_z, deadline, compiled
        )
        if progress is not None:
            progress(r * w * others)
        sim_cost = simulated.cost.masked_fill(~valid.flatten(1), float("inf"))  # [R, W(E-1)]
        child_prefix = _pad_cat(
            beam_prefix.repeat_interleave(others, dim=1), child_action.flatten(1).unsqueeze(-1)
        )
        incumbent.offer(first_row, sim_cost, _pad_cat(child_prefix, completion))

        # candidates: the W greedy children (known costs) then the W (E-1) simulated ones
        greedy_state = env.step(beam_state, greedy_action)
        candidate_cost = torch.cat([beam_cost, sim_cost], dim=1)
        keep = candidate_cost.argsort(dim=-1, stable=True)[:, :beam_width]  # [R, W']
        from_greedy = keep < w
        greedy_pick = keep.clamp_max(w - 1)
        child_pick = (keep - w).clamp_min(0)
        beam_state = greedy_state.select(greedy_pick).where(
            from_greedy, child_state.select(child_pick)
        )
        greedy_prefix = _pad_cat(beam_prefix, greedy_action.unsqueeze(-1))
        beam_prefix = torch.where(
            from_greedy.unsqueeze(-1),
            _gather(greedy_prefix, greedy_pick),
            _gather(child_prefix, child_pick),
        )
        if beam_z is not None:
            beam_z = torch.where(
                from_greedy.unsqueeze(-1),
                _gather(beam_z, greedy_pick),
                _gather(child_z, child_pick),
            )
        beam_cost = candidate_cost[rows_index, keep]
    if not bool(beam_state.finished.all()):
        raise RuntimeError("SGBS did not finish within the environment's step bound")
    return start_cost
