"""CVRP environment: golden replay against the reference, hand-computed costs, degenerate
instances."""

from __future__ import annotations

import math

import pytest
import torch

from linc_core.decoding import DecodeConfig, decode
from linc_core.instances import Instance
from linc_core.problems import CVRPEnv
from linc_core.verify import verify_instance
from tests.conftest import tiny_policy
from tests.golden import load_golden


def test_golden_replay_matches_reference() -> None:
    case = load_golden("cvrp_env_golden.json")["cases"][0]
    instance = Instance.from_arrays(
        "cvrp",
        [case["depot_xy"], *case["node_xy"]],
        demand=[0, *case["demand"]],
        capacity=case["capacity"],
    )
    env = CVRPEnv(instance, num_rollouts=1)
    state = env.reset()
    for record, action in zip(case["steps"], case["actions"][1:], strict=True):
        assert state.current.item() == record["current_node"]
        assert state.load.item() == pytest.approx(record["load_fraction"], abs=1e-5)
        assert state.mask[0, 0].tolist() == record["feasible"], f"step {record['step']}"
        expected = torch.tensor(record["features_all_nodes"])
        torch.testing.assert_close(env.consequences(state)[0, 0], expected, atol=1e-5, rtol=0)
        state = env.step(state, torch.tensor([[action]]))
    assert bool(state.finished.all())
    assert state.cost.item() == pytest.approx(case["cost"], abs=1e-5)


def test_capacity_refill_and_hand_cost() -> None:
    """Square of side 1 around the depot; capacity forces two routes."""
    instance = Instance.from_arrays(
        "cvrp",
        [(0, 0), (1, 0), (1, 1), (0, 1)],
        demand=[0, 2, 2, 2],
        capacity=4.0,
        dtype=torch.float64,
    )
    env = CVRPEnv(instance, num_rollouts=1)
    s = env.reset()
    assert s.mask[0, 0].tolist() == [False, True, True, True]
    s = env.step(s, torch.tensor([[1]]))
    s = env.step(s, torch.tensor([[2]]))
    # Load 0 left: only the depot.
    assert s.mask[0, 0].tolist() == [True, False, False, False]
    s = env.step(s, torch.tensor([[0]]))
    assert s.load.item() == 1.0
    s = env.step(s, torch.tensor([[3]]))
    s = env.step(s, torch.tensor([[0]]))
    assert bool(s.finished.item())
    assert s.cost.item() == pytest.approx(1 + 1 + math.sqrt(2) + 1 + 1)


def test_nodes_that_all_coincide_give_finite_features_and_decode() -> None:
    # Every distance 0: the features' distance scale was 0 and the table 0 / 0 = NaN, so no
    # rollout could choose and a decode ended in "rollouts did not finish".
    instance = Instance.from_arrays("cvrp", [(2, 3)] * 4, demand=[0, 1, 1, 1], capacity=2.0)
    env = CVRPEnv(instance, num_rollouts=2)
    table = env.consequences(env.reset())
    assert bool(torch.isfinite(table).all())
    assert table[..., 0].abs().max().item() == 0.0  # travel: no distance anywhere
    policy = tiny_policy("full_linc", "cvrp")
    result = decode(policy, instance, DecodeConfig(method="sampling", num_z=4, augment=1))
    assert result.cost.tolist() == [0.0]
    assert verify_instance(instance, 0, result.routes[0]).feasible
