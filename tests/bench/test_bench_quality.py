"""The rl4co peer of the time-to-quality bench sees linc's instances as linc does: any route set
rl4co's CVRPTW env lets it build on a converted instance passes linc's verifier."""

from __future__ import annotations

import pytest
import torch

from linc_core.problems.base import actions_to_routes
from linc_core.train.data import generate
from linc_core.verify import verify_instance

# rl4co is the bench's peer, installed by `make bench` (never a dependency): that target runs this.
pytestmark = pytest.mark.bench


def test_every_route_set_rl4co_allows_on_a_converted_instance_is_feasible_for_linc() -> None:
    from rl4co.envs import CVRPTWEnv

    from bench.rl4co_peer import to_rl4co

    batch = generate("cvrptw", 64, 50, 7)
    env = CVRPTWEnv(generator_params={"num_loc": 50})
    td = env.reset(to_rl4co(batch))
    torch.manual_seed(0)
    actions = []
    for _ in range(400):  # random rollouts among the actions rl4co's mask allows
        allowed = td["action_mask"]
        assert bool(allowed.any(-1).all()), "a state with no allowed action"
        action = torch.multinomial(allowed.float(), 1).squeeze(-1)
        actions.append(action)
        td.set("action", action)
        td = env.step(td)["next"]
        if bool(td["done"].all()):
            break
    assert bool(td["done"].all())
    sequences = torch.stack(actions, 1)
    env.check_solution_validity(env.reset(to_rl4co(batch)), sequences)  # rl4co agrees too
    for i in range(batch.batch_size):
        checked = verify_instance(batch, i, actions_to_routes(sequences[i]))
        assert checked.feasible, checked.violations
        # rl4co's reward is the same length in its units (coordinates x alpha / horizon)
        horizon = float(batch.time_windows[i, 0, 1])
        scale = float(batch.travel_time_scale[i]) / horizon
        assert -float(env.get_reward(td[i : i + 1], sequences[i : i + 1])) == pytest.approx(
            checked.cost * scale, rel=1e-4
        )
