"""The rollout engine: the one loop that steps an environment until every rollout has finished.

Training, validation, sampling, multi-start, SGBS simulations, the diagnostics and the random
baseline all decode through ``complete_rollouts``; each brings its own choice rule
``choose(state, step) -> [B, K] actions`` (a policy's sampler or argmax, a uniform random
feasible node, a replay of recorded actions). ``start_rollouts`` places the rollouts at their
start (the environment's reset, then the forced first move of POMO multi-start or TSP).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.problems.protocol import RoutingEnv, StateT

Chooser = Callable[[StateT, int], Tensor]
Transition = Callable[[StateT, Tensor], StateT]


def pomo_starts(instance: Instance, num_rollouts: int) -> Tensor:
    """POMO multi-start first moves ``[B, K]``: customer k + 1 (city k for TSP) for rollout k.

    Raises:
        ValueError: more rollouts than customers (each start must be a distinct customer).
    """
    if num_rollouts > instance.num_customers:
        raise ValueError(
            f"multi-start needs num_rollouts <= {instance.num_customers} customers, "
            f"got {num_rollouts}"
        )
    offset = 1 if instance.has_depot else 0
    starts = torch.arange(offset, offset + num_rollouts, device=instance.device)
    return starts.expand(instance.batch_size, num_rollouts)


def start_rollouts(env: RoutingEnv[StateT], starts: Tensor | None = None) -> tuple[StateT, Tensor]:
    """The reset state, after the forced first move when ``starts`` is given.

    A tour without a depot (TSP) and without ``starts`` starts at node 0 (every tour is a
    cycle, so the start is a convention, not a decision). A forced move has probability 1:
    it is not a decision.

    Args:
        starts: ``[B, K]`` long forced first moves, or None.

    Returns:
        (state, prefix actions ``[B, K, 0 or 1]``).
    """
    state = env.reset()
    b, k = state.current.shape
    device = state.current.device
    if starts is None and not env.instance.has_depot:
        starts = torch.zeros(b, k, dtype=torch.long, device=device)
    if starts is None:
        return state, torch.zeros(b, k, 0, dtype=torch.long, device=device)
    return env.step(state, starts), starts.unsqueeze(-1)


def complete_rollouts(
    env: RoutingEnv[StateT],
    choose: Chooser,
    state: StateT | None = None,
    *,
    first_step: int = 0,
    transition: Transition | None = None,
) -> tuple[StateT, Tensor]:
    """Run ``choose(state, step)`` and ``env.step`` until every rollout has finished.

    Finished rollouts keep receiving actions (the environments make their one feasible action
    harmless), so every rollout of the batch moves in lock-step. The loop reads the batch's
    progress from the device only when it could have ended: it reads the largest of the
    rollouts' lower bounds on the decisions left (``env.decisions_left``) and runs that many
    decisions before it reads again. So it stops after exactly the decision at which the last
    rollout finishes, as a check after every decision would, with a few reads per rollout
    instead of one per decision (on CUDA each read is a host-device synchronisation that
    drains the queue of launched kernels). At most ``env.max_steps`` decisions are taken; a
    rollout that has not finished by then is a bug in the environment or the instance, and
    raises.

    Args:
        choose: the choice rule; ``step`` counts decisions from ``first_step``.
        state: where to continue from (default: ``env.reset()``).
        first_step: the decision index of ``state`` (keyed samplers derive their noise from it).
        transition: ``(state, action) -> state`` in place of ``env.step`` (the same step
            compiled: ``PolicyChooser.transition``).

    Returns:
        (final state, actions ``[B, K, T]`` long chosen from ``state`` on).
    """
    state = env.reset() if state is None else state
    advance = env.step if transition is None else transition
    actions: list[Tensor] = []
    step, last_step = first_step, first_step + env.max_steps
    while (left := int(env.decisions_left(state).max())) > 0:
        if step + left > last_step:
            raise RuntimeError(f"rollouts did not finish within {env.max_steps} decisions")
        for _ in range(left):
            action = choose(state, step)
            actions.append(action)
            state = advance(state, action)
            step += 1
    if not actions:
        b, k = state.current.shape
        return state, torch.zeros(b, k, 0, dtype=torch.long, device=state.current.device)
    return state, torch.stack(actions, dim=-1)


__all__ = ["Chooser", "Transition", "complete_rollouts", "pomo_starts", "start_rollouts"]
