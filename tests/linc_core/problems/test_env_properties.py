"""Property tests: environments against the independent verifier.

For random instances (drawn by hypothesis) and real benchmark instances:
- rollouts that pick a random feasible action always finish;
- ``decisions_left`` is a lower bound on the decisions a rollout still takes, 0 once finished;
- the environment's cost equals ``verify.py``'s ``exact`` cost, with no violation;
- every action the mask rejects, appended to the partial solution, makes ``verify.py`` report
  a violation other than "missing" (the partial solution misses customers by construction),
  except the reference's explicit rule that forbids depot -> depot moves.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linc_core.instances import Instance, read_cvrplib, read_solomon
from linc_core.problems import make_env, random_feasible_actions
from linc_core.problems.base import actions_to_routes
from linc_core.verify import verify_instance

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def random_cvrptw(seed: int, n: int, alpha: float, tightness: float) -> Instance:
    """A random CVRPTW instance in which every customer can be served alone.

    Windows are cut around each customer's feasible service-start interval
    ``[alpha * d0k, H - service - alpha * dk0]``, so tight ones bind often; half of the dues
    are then stretched towards the horizon, so that the depot-return rule binds on its own.
    """
    rng = np.random.default_rng(seed)
    locs = rng.uniform(0, 100, size=(n + 1, 2))
    d0 = np.linalg.norm(locs - locs[0], axis=1) * alpha
    service = 5.0
    horizon = 2 * d0.max() + service + rng.uniform(20, 200)
    lb, ub = d0, horizon - service - d0
    centre = lb + rng.uniform(0, 1, n + 1) * (ub - lb)
    half = (ub - lb) * (1 - tightness) * rng.uniform(0.05, 0.5, n + 1)
    ready, due = np.maximum(lb, centre - half), np.minimum(ub, centre + half)
    stretch = rng.uniform(0, 1, n + 1) < 0.5
    due = np.where(stretch, due + rng.uniform(0, 1, n + 1) * (horizon - due), due)
    tw = np.stack([ready, due], axis=1)
    tw[0] = (0.0, horizon)
    demand = rng.integers(1, 10, n + 1).astype(float)
    demand[0] = 0
    return Instance.from_arrays(
        "cvrptw",
        locs,
        demand=demand,
        capacity=float(rng.integers(10, 30)),
        time_windows=tw,
        service_time=[0.0] + [service] * n,
        travel_time_scale=alpha,
        grid_size=100.0,
        dtype=torch.float64,
    )


def random_cvrp(seed: int, n: int) -> Instance:
    rng = np.random.default_rng(seed)
    demand = rng.integers(1, 10, n + 1).astype(float)
    demand[0] = 0
    return Instance.from_arrays(
        "cvrp",
        rng.uniform(0, 1, size=(n + 1, 2)),
        demand=demand,
        capacity=float(rng.integers(9, 25)),
        dtype=torch.float64,
    )


def check_rollouts(
    instance: Instance, rollouts: int, seed: int, rejections_per_step: int | None
) -> None:
    """Roll out random feasible actions; check finishing, cost, violations and rejections."""
    env = make_env(instance, rollouts)
    gen = torch.Generator().manual_seed(seed)
    pick = np.random.default_rng(seed)
    state = env.reset()
    taken: list[torch.Tensor] = []
    bounds = [env.decisions_left(state)[0]]  # of every state, [K] each
    for _ in range(env.max_steps):
        if bool(state.finished.all()):
            break
        for k in range(rollouts):
            if not bool(state.finished[0, k]):
                check_rejections(instance, state, taken, k, pick, rejections_per_step)
        action = random_feasible_actions(state.mask, gen)
        taken.append(action)
        state = env.step(state, action)
        bounds.append(env.decisions_left(state)[0])
    assert bool(state.finished.all()), "random feasible rollout did not finish"
    actions = torch.stack(taken, dim=-1)[0]  # [K, T]
    check_decisions_left(torch.stack(bounds))
    for k in range(rollouts):
        routes = solution_of(instance, actions[k].tolist())
        result = verify_instance(instance, 0, routes, convention="exact")
        assert result.feasible, result.violations
        assert state.cost[0, k].item() == pytest.approx(result.cost, rel=1e-9, abs=1e-9)


def check_decisions_left(bounds: torch.Tensor) -> None:
    """``decisions_left`` (``[T + 1, K]``, one row per state of the rollouts) is 0 exactly from
    the state at which a rollout has finished, and never more than the decisions it then took
    to finish (the rollout engine skips its reads on that bound)."""
    for k in range(bounds.shape[1]):
        finished_at = int((bounds[:, k] == 0).nonzero()[0])
        assert bool((bounds[finished_at:, k] == 0).all())
        taken_after = torch.arange(finished_at, 0, -1)  # decisions each earlier state needed
        assert bool((bounds[:finished_at, k] >= 1).all())
        assert bool((bounds[:finished_at, k] <= taken_after).all()), bounds[:, k]


def solution_of(instance: Instance, actions: list[int]) -> list[list[int]]:
    if instance.problem == "tsp":
        return [actions]
    return actions_to_routes(actions)


def check_rejections(
    instance: Instance,
    state: object,
    taken: list[torch.Tensor],
    k: int,
    pick: np.random.Generator,
    limit: int | None,
) -> None:
    mask = state.mask[0, k]
    rejected = (~mask).nonzero().flatten().tolist()
    if limit is not None and len(rejected) > limit:
        rejected = pick.choice(rejected, size=limit, replace=False).tolist()
    history = [int(a[0, k]) for a in taken]
    at_depot = instance.has_depot and int(state.current[0, k]) == 0
    for node in rejected:
        if at_depot and node == 0:
            continue  # the reference's explicit rule: no depot -> depot move
        result = verify_instance(instance, 0, solution_of(instance, history + [node]), "exact")
        real = set(result.kinds()) - {"missing"}
        assert real, f"mask rejected node {node} after {history}, but verify finds it feasible"


@PROPERTY_SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 9),
    alpha=st.floats(0.8, 1.3),
    tightness=st.floats(0.0, 0.95),
)
def test_random_cvrptw_rollouts_agree_with_verifier(
    seed: int, n: int, alpha: float, tightness: float
) -> None:
    check_rollouts(
        random_cvrptw(seed, n, alpha, tightness), rollouts=4, seed=seed, rejections_per_step=None
    )


@PROPERTY_SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 9))
def test_random_cvrp_rollouts_agree_with_verifier(seed: int, n: int) -> None:
    check_rollouts(random_cvrp(seed, n), rollouts=4, seed=seed, rejections_per_step=None)


@PROPERTY_SETTINGS
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 9))
def test_random_tsp_rollouts_agree_with_verifier(seed: int, n: int) -> None:
    locs = np.random.default_rng(seed).uniform(0, 10, size=(n, 2))
    instance = Instance.from_arrays("tsp", locs, dtype=torch.float64)
    check_rollouts(instance, rollouts=3, seed=seed, rejections_per_step=None)


@pytest.mark.parametrize("name", ["C101", "R101", "RC105", "R211", "C204"])
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_solomon_rollouts_agree_with_verifier(data_dir, name: str, seed: int) -> None:
    instance = read_solomon(data_dir / "solomon100" / f"{name}.txt", dtype=torch.float64)
    check_rollouts(instance, rollouts=2, seed=seed, rejections_per_step=2)


@settings(max_examples=2, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_cvrplib_rollouts_agree_with_verifier(data_dir, seed: int) -> None:
    instance = read_cvrplib(data_dir / "cvrplib_x" / "X-n101-k25.vrp", dtype=torch.float64)
    check_rollouts(instance, rollouts=2, seed=seed, rejections_per_step=2)
