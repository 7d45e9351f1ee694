"""Env rollout throughput: our CVRPTWEnv vs rl4co's CVRPTWEnv, side by side, same instances.

Both run complete rollouts of a uniform random feasible policy (the same masked-argmax of
uniform scores) over B instances x K rollouts, and we count env steps per second (one step =
one batched transition of all B x K rollouts). rl4co is only installed for benchmarking.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from linc_core.instances import Instance
from linc_core.problems import CVRPTWEnv, random_feasible_actions


def rl4co_instances(batch: int, num_customers: int, seed: int) -> tuple[Any, Any, Instance]:
    """Instances from rl4co's own CVRPTW generator, and the same data as our ``Instance``."""
    from rl4co.envs import CVRPTWEnv as RL4COCVRPTWEnv

    torch.manual_seed(seed)  # rl4co's generator draws from the global stream
    env = RL4COCVRPTWEnv(generator_params={"num_loc": num_customers})
    td = env.reset(batch_size=[batch])
    demand = torch.cat([torch.zeros(batch, 1), td["demand"]], dim=1)  # already / capacity
    instance = Instance.from_arrays(
        "cvrptw",
        td["locs"],
        demand=demand,
        capacity=1.0,
        time_windows=td["time_windows"].float(),
        service_time=td["durations"].float(),
        grid_size=150.0,
    )
    return env, td, instance


def time_ours(instance: Instance, rollouts: int, seed: int) -> tuple[int, float]:
    env = CVRPTWEnv(instance, rollouts)
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    state = env.reset()
    steps = 0
    while not bool(state.finished.all()):
        state = env.step(state, random_feasible_actions(state.mask, gen))
        steps += 1
    return steps, time.perf_counter() - start


def time_rl4co(env: Any, td: Any, rollouts: int, seed: int) -> tuple[int, float]:
    from rl4co.utils.ops import batchify

    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    td = batchify(td, rollouts)
    steps = 0
    while "done" not in td or not bool(td["done"].all()):
        td.set("action", random_feasible_actions(td["action_mask"], gen))
        td = env.step(td)["next"]
        steps += 1
    return steps, time.perf_counter() - start


def bench_env(
    batch: int = 64, rollouts: int = 128, num_customers: int = 100, repeats: int = 3
) -> dict:
    """Median steps/s of both environments over ``repeats`` interleaved runs."""
    env, td, instance = rl4co_instances(batch, num_customers, seed=0)
    ours, theirs = [], []
    for r in range(repeats):
        s, t = time_ours(instance, rollouts, seed=r)
        ours.append(s / t)
        s, t = time_rl4co(env, td.clone(), rollouts, seed=r)
        theirs.append(s / t)
    ours.sort()
    theirs.sort()
    ours_med, theirs_med = ours[len(ours) // 2], theirs[len(theirs) // 2]
    return {
        "name": f"CVRPTW env steps/s (n={num_customers}, B={batch}, K={rollouts}, random policy)",
        "ours": ours_med,
        "peer": theirs_med,
        "peer_name": "rl4co 0.7.0 CVRPTWEnv",
        "ratio": ours_med / theirs_med,
        "target": 3.0,
    }


if __name__ == "__main__":
    from linc_core.utils.runtime import tune_cpu_allocator

    tune_cpu_allocator()
    print(bench_env())
