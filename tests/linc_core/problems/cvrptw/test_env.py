"""CVRPTW environment: golden replay against the reference, and a hand-computed example."""

from __future__ import annotations

import math

import pytest
import torch

from linc_core.instances import Instance
from linc_core.problems import CVRPTWEnv, complete_rollouts
from linc_core.problems.cvrptw import CVRPTWState
from tests.golden import load_golden


def instance_from_golden(case: dict) -> Instance:
    n = len(case["node_xy"])
    return Instance.from_arrays(
        "cvrptw",
        [case["depot_xy"], *case["node_xy"]],
        demand=[0.0, *case["demand"]],
        capacity=case["capacity"],
        time_windows=[[0.0, case["depot_due"]], *case["node_tw"]],
        service_time=[0.0] + [case["service_time"]] * n,
        travel_time_scale=case["alpha"],
        grid_size=case["grid_size"],
    )


@pytest.mark.parametrize("case_index", [0, 1])
def test_golden_replay_matches_reference(case_index: int) -> None:
    """Replaying the recorded actions reproduces time, load, mask, the six features and cost."""
    case = load_golden("cvrptw_env_golden.json")["cases"][case_index]
    env = CVRPTWEnv(instance_from_golden(case), num_rollouts=1)
    state = env.reset()
    assert case["actions"][0] == 0  # the forced depot start is done by reset()
    for record, action in zip(case["steps"], case["actions"][1:], strict=True):
        assert state.current.item() == record["current_node"]
        assert state.time.item() == pytest.approx(record["time"], abs=1e-5, rel=1e-6)
        assert state.load.item() == pytest.approx(record["load_fraction"], abs=1e-5)
        assert state.mask[0, 0].tolist() == record["feasible"], f"step {record['step']}"
        features = env.consequences(state)[0, 0]
        expected = torch.tensor(record["features_customers"])
        torch.testing.assert_close(features[1:], expected, atol=1e-5, rtol=0)
        assert features[0].abs().max().item() == 0.0  # depot row
        state = env.step(state, torch.tensor([[action]]))
    assert bool(state.finished.all())
    assert state.cost.item() == pytest.approx(case["cost"], abs=1e-4)


# ---------------------------------------------------------------------------------------------
# A hand-computed instance (alpha = 1, depot due 80, capacity 6, service 2):
#   node  xy        demand  window     notes
#   0     (0, 0)    -       [0, 80]    depot
#   1     (3, 4)    2       [10, 20]   5 from the depot: arrives early, waits 5
#   2     (6, 8)    3       [0, 12]    5 from node 1, 10 from the depot
#   3     (0, 10)   4       [0, 50]    sqrt(45) from node 1: fills the vehicle exactly
#   4     (0, -30)  1       [0, 100]   30 from the depot: servable alone, not after others
#   5     (0, 12)   1       [0, 100]   2 from node 3
HAND_XY = [(0, 0), (3, 4), (6, 8), (0, 10), (0, -30), (0, 12)]
HAND_DEMAND = [0, 2, 3, 4, 1, 1]
HAND_TW = [(0, 80), (10, 20), (0, 12), (0, 50), (0, 100), (0, 100)]


def hand_env() -> CVRPTWEnv:
    instance = Instance.from_arrays(
        "cvrptw",
        HAND_XY,
        demand=HAND_DEMAND,
        capacity=6.0,
        time_windows=HAND_TW,
        service_time=[0, 2, 2, 2, 2, 2],
        grid_size=100.0,
        dtype=torch.float64,
    )
    return CVRPTWEnv(instance, num_rollouts=1)


def feasible(state: CVRPTWState) -> list[int]:
    return [i for i, ok in enumerate(state.mask[0, 0].tolist()) if ok]


def advance(env: CVRPTWEnv, state: CVRPTWState, node: int) -> CVRPTWState:
    return env.step(state, torch.tensor([[node]]))


def test_hand_example_mask_rules_one_by_one() -> None:
    env = hand_env()
    s = env.reset()
    # At the depot: every customer can be reached; the depot itself cannot (no depot->depot).
    assert feasible(s) == [1, 2, 3, 4, 5]

    s = advance(env, s, 1)  # arrive 5, wait until 10, leave at 12
    assert s.time.item() == pytest.approx(12.0)
    assert s.load.item() == pytest.approx(4 / 6)
    # Node 2 is masked by its window alone: arrival 12 + 5 = 17 > due 12 (demand 3/6 fits,
    # the return would be in time). Node 4 still fits: arrival 12 + sqrt(1165) = 46.13,
    # back at the depot at 46.13 + 2 + 30 = 78.13 <= 80. Node 3 fills the vehicle exactly.
    assert feasible(s) == [0, 3, 4, 5]

    s = advance(env, s, 3)  # arrival 12 + sqrt(45)
    assert s.time.item() == pytest.approx(12 + math.sqrt(45) + 2)
    assert s.load.item() == pytest.approx(0.0, abs=1e-12)
    # Node 5 (2 away, wide window, returns at 38.7) is masked by capacity alone; node 4 by
    # capacity and by the depot return (20.7 + 40 + 2 + 30 = 92.7 > 80); node 2 by capacity
    # and window. Only the depot is left.
    assert feasible(s) == [0]

    s = advance(env, s, 0)
    assert s.time.item() == 0.0 and s.load.item() == 1.0
    assert feasible(s) == [2, 4, 5]  # depot masked again

    s = advance(env, s, 2)  # arrival 10 <= due 12, leave 12
    assert s.time.item() == pytest.approx(12.0)
    # Node 4: arrival 12 + sqrt(1480) = 50.47 <= 100, return 50.47 + 2 + 30 = 82.47 > 80:
    # masked by the depot-return rule alone (capacity 1/6 <= 1/2, window fine).
    assert feasible(s) == [0, 5]

    s = advance(env, s, 5)  # arrival 12 + sqrt(52)
    assert s.time.item() == pytest.approx(12 + math.sqrt(52) + 2)
    assert feasible(s) == [0]  # node 4: 21.2 + 42 + 2 + 30 = 95.2 > 80

    s = advance(env, s, 0)
    assert feasible(s) == [4]
    s = advance(env, s, 4)
    assert s.time.item() == pytest.approx(32.0)
    assert feasible(s) == [0]
    s = advance(env, s, 0)
    assert bool(s.finished.item())
    assert feasible(s) == [0]  # finished rollouts pad with the depot
    expected = (5 + math.sqrt(45) + 10) + (10 + math.sqrt(52) + 12) + 60
    assert s.cost.item() == pytest.approx(expected, abs=1e-9)


def test_hand_example_consequence_table() -> None:
    """Travel, wait, slack, arrival, departure and angle by hand at the first two decisions."""
    env = hand_env()
    s = env.reset()
    table = env.consequences(s)[0, 0]
    h = 80.0 + 1e-6  # the depot due binds; the reference divides by H + 1e-6
    scale = 42.0  # the largest travel time: node 5 <-> node 4
    # Customer 1 from the depot at t=0: arrive 5, wait 5, start 10, slack 20-10, leave 12;
    # its angle about the depot is atan2(4, 3), the depot's own is 0.
    expected_1 = [5 / scale, 5 / h, 10 / h, 5 / h, 12 / h, math.atan2(4, 3) / math.pi]
    torch.testing.assert_close(table[1], torch.tensor(expected_1, dtype=torch.float64))
    s = advance(env, s, 1)
    table = env.consequences(s)[0, 0]
    travel_13 = math.sqrt(45)
    arrival_3 = 12 + travel_13
    expected_3 = [
        travel_13 / scale,
        0.0,
        (50 - arrival_3) / h,
        arrival_3 / h,
        (arrival_3 + 2) / h,
        abs(math.pi / 2 - math.atan2(4, 3)) / math.pi,
    ]
    torch.testing.assert_close(table[3], torch.tensor(expected_3, dtype=torch.float64))
    # Node 2 misses its window: its slack is negative (due 12 - arrival 17).
    assert table[2, 2].item() == pytest.approx((12 - 17) / h)
    # Node 4 is straight below the depot: angle difference pi/2 + atan2(4,3) wrapped.
    theta_1, theta_4 = math.atan2(4, 3), -math.pi / 2
    assert table[4, 5].item() == pytest.approx(abs(theta_4 - theta_1) / math.pi)
    assert table[0].abs().max().item() == 0.0


def test_depot_unmasked_only_when_nothing_else_is_feasible() -> None:
    """A customer nobody can serve (window closed before any arrival) leaves the depot open."""
    instance = Instance.from_arrays(
        "cvrptw",
        [(0, 0), (10, 0)],
        demand=[0, 1],
        capacity=5.0,
        time_windows=[(0, 100), (0, 5)],
        service_time=[0, 1],
    )
    env = CVRPTWEnv(instance, num_rollouts=2)
    state = env.reset()
    assert state.mask[0].tolist() == [[True, False], [True, False]]
    assert not bool(state.finished.any())


def test_route_length_matches_accumulated_cost() -> None:
    env = hand_env()
    actions = torch.tensor([[[1, 3, 0, 2, 5, 0, 4, 0]]])
    state = env.reset()
    for t in range(actions.shape[-1]):
        state = env.step(state, actions[..., t])
    assert env.route_length(actions).item() == pytest.approx(state.cost.item(), abs=1e-9)


def test_rollouts_are_independent_across_batch_and_k() -> None:
    """Stepping a [B, K] batch equals stepping each rollout alone (no cross-talk)."""
    env = hand_env()
    big = Instance.concat([env.instance, env.instance])
    env2 = CVRPTWEnv(big, num_rollouts=3)
    gen = torch.Generator().manual_seed(0)

    def choose(state: CVRPTWState, step: int) -> torch.Tensor:
        scores = torch.rand(state.mask.shape, generator=gen, dtype=torch.float64)
        return scores.masked_fill(~state.mask, -1).argmax(-1)

    final, actions = complete_rollouts(env2, choose)
    for b in range(2):
        for k in range(3):
            solo = env.reset()
            for t in range(actions.shape[-1]):
                solo = env.step(solo, actions[b : b + 1, k : k + 1, t])
            assert solo.cost.item() == pytest.approx(final.cost[b, k].item(), abs=1e-9)
