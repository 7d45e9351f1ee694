"""``decode(policy, instances, config)``: the one entry point of every decoding method."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from linc_core.decoding.best_of_k import BestRollouts, decode_best_of_k, make_rows
from linc_core.decoding.config import DecodeConfig
from linc_core.decoding.sgbs import sgbs_rows
from linc_core.instances import Instance
from linc_core.model.policy import LincPolicy
from linc_core.problems.base import actions_to_routes
from linc_core.problems.spec import problem_spec


@dataclass(frozen=True)
class DecodeResult:
    """Best solutions of a decode call over B instances and A augmented copies.

    Attributes:
        cost: ``[B]`` float64, best over z x augmentation, exact Euclidean distance recomputed
            in float64 on the instance as given (not the augmented copy).
        routes: B solutions, ready for ``verify.verify_instance``: CVRP/CVRPTW a list of routes
            of customer ids (depot implicit), TSP ``[tour]`` of city ids.
        aug_cost: ``[B, A]`` float64, the best exact cost of each augmented copy.
        aug_routes: ``aug_routes[b][a]`` the solution behind ``aug_cost[b, a]``.
        greedy_start_cost: ``[B]`` (SGBS only) best environment cost (model dtype) of the
            initial greedy rollouts over the augmented copies: the search's own start.
        seconds: wall time of the call.
        rollouts: complete rollouts decoded (SGBS: initial rollouts plus simulations).
    """

    cost: Tensor
    routes: list[list[list[int]]]
    aug_cost: Tensor
    aug_routes: list[list[list[list[int]]]]
    seconds: float
    rollouts: int
    greedy_start_cost: Tensor | None = None

    @property
    def rollouts_per_second(self) -> float:
        return self.rollouts / self.seconds if self.seconds > 0 else float("inf")


def actions_to_solution(actions: Tensor, problem: str, num_nodes: int) -> list[list[int]]:
    """One rollout's actions (forced prefix included) as a verifier-ready solution: depot
    routes, or one tour where the problem has no depot."""
    if not problem_spec(problem).has_depot:
        return [[int(a) for a in actions[:num_nodes].tolist()]]
    return actions_to_routes(actions)


def exact_length(instance: Instance, index: int, solution: list[list[int]]) -> float:
    """Float64 Euclidean length of ``solution`` on row ``index`` of ``instance``."""
    locs = instance.locs[index].detach().cpu().double()
    if not instance.has_depot:
        tour = torch.tensor(solution[0], dtype=torch.long)
        path = torch.cat([tour, tour[:1]])
    else:
        nodes: list[int] = []
        for route in solution:
            nodes.extend([0, *route])
        path = torch.tensor([*nodes, 0], dtype=torch.long)
    legs = locs[path[1:]] - locs[path[:-1]]
    return float(legs.square().sum(-1).sqrt().sum())


def _model_dtype(policy: LincPolicy) -> torch.dtype:
    return next(policy.parameters()).dtype


@torch.no_grad()
def decode(
    policy: LincPolicy,
    instances: Instance,
    config: DecodeConfig,
    *,
    progress: Callable[[int], None] | None = None,
    deadline: float | None = None,
) -> DecodeResult:
    """Decode a batch of B same-size instances with ``config``'s method and budget.

    z-vectors and sampling draws are seeded per (instance content, augmentation) from
    ``config.seed`` (see ``linc_core.decoding.best_of_k``), so an instance's result depends on
    neither ``max_rollouts_per_chunk`` nor the other instances of the batch nor its position.

    Args:
        policy: a model for ``instances.problem`` (put in eval mode here).
        instances: B instances; any float dtype (cast to the model's for decoding; costs are
            recomputed in float64 on the instances as given).
        config: method and budget.
        progress: called with the number of rollouts completed after each chunk.
        deadline: an instant of ``time.monotonic()``; past it, decoding stops within one
            decision and raises ``linc_core.decoding.deadline.DeadlineExceeded``.

    Returns:
        ``DecodeResult``.
    """
    if instances.problem != policy.config.problem:
        raise ValueError(
            f"decode: the model is for {policy.config.problem}, got {instances.problem} instances"
        )
    policy.eval()
    began = time.perf_counter()
    device = next(policy.parameters()).device
    rows = make_rows(instances, config.augment, _model_dtype(policy), device)
    counter = _Counter(progress)
    greedy_start = None
    if config.method == "sgbs":
        best, greedy_start_rows = sgbs_rows(
            policy,
            rows,
            beam_width=config.beam_width,
            expansion=config.expansion,
            initial_rollouts=config.sgbs_z,
            seed=config.seed,
            max_rollouts_per_chunk=config.rollouts_per_chunk(device),
            progress=counter,
            deadline=deadline,
            compiled=config.compile,
        )
        greedy_start = greedy_start_rows
    else:
        multistart = config.method == "multistart"
        best = decode_best_of_k(
            policy,
            rows,
            config.rollouts_per_row(instances.num_customers, policy.config.z_dim),
            sample=config.method == "sampling",
            multistart=multistart,
            seed=config.seed,
            max_rollouts_per_chunk=config.rollouts_per_chunk(device),
            progress=counter,
            deadline=deadline,
            compiled=config.compile,
        )
    seconds = time.perf_counter() - began
    return _collect(instances, best, config.augment, seconds, counter.total, greedy_start)


class _Counter:
    """Counts rollouts while forwarding to the caller's progress callback."""

    def __init__(self, forward: Callable[[int], None] | None) -> None:
        self.total = 0
        self.forward = forward

    def __call__(self, done: int) -> None:
        self.total += done
        if self.forward is not None:
            self.forward(done)


def _collect(
    instances: Instance,
    best: BestRollouts,
    augment: int,
    seconds: float,
    rollouts: int,
    greedy_start_rows: Tensor | None,
) -> DecodeResult:
    b = instances.batch_size
    aug_cost = torch.empty(b, augment, dtype=torch.float64)
    aug_routes: list[list[list[list[int]]]] = [[] for _ in range(b)]
    for row, actions in enumerate(best.actions.cpu()):
        a, i = divmod(row, b)
        solution = actions_to_solution(actions, instances.problem, instances.num_nodes)
        aug_routes[i].append(solution)
        aug_cost[i, a] = exact_length(instances, i, solution)
    choice = aug_cost.argmin(-1)
    routes = [aug_routes[i][int(choice[i])] for i in range(b)]
    greedy_start = None
    if greedy_start_rows is not None:
        greedy_start = greedy_start_rows.view(augment, b).min(0).values.cpu()
    return DecodeResult(
        cost=aug_cost.min(-1).values,
        routes=routes,
        aug_cost=aug_cost,
        aug_routes=aug_routes,
        seconds=seconds,
        rollouts=rollouts,
        greedy_start_cost=greedy_start,
    )
