"""rl4co as the benchmarks' peer: its PolyNet at our sizes, and linc's instances and routes in
its terms.

rl4co is installed for benchmarking only (``make bench``) and imported here when called, never by
``linc_core``. ``to_rl4co`` hands rl4co linc's CVRPTW batches, so that both sides of a
comparison train and decode the same instances. rl4co's actions number the nodes as linc's do
(0 the depot), so ``linc_core.problems.base.actions_to_routes`` reads them as linc's routes,
which linc's verifier checks (``tests/bench/test_bench_quality.py``: every route set rl4co
builds on a converted instance is feasible for linc).
"""

from __future__ import annotations

import warnings

import torch

from linc_core.config import ModelConfig
from linc_core.instances import Instance

RL4CO_PEER = "rl4co 0.7.0 PolyNet on rl4co CVRPTWEnv, linc's instances"


def polynet(batch: int, rollouts: int, n: int, seed: int, sizes: ModelConfig) -> tuple:
    """(rl4co's CVRPTW env, a PolyNet on it with k = ``rollouts`` and our sizes)."""
    from rl4co.envs import CVRPTWEnv
    from rl4co.models.zoo.polynet import PolyNet

    torch.manual_seed(seed)  # rl4co draws its weights from the global stream
    env = CVRPTWEnv(generator_params={"num_loc": n})
    # rl4co re-checks every training solution with asserts that its own mask can fail by float
    # error on a converted instance (seen once in an hour: "Used more than capacity"); linc's
    # verifier checks the route sets that count instead (and off, the peer is faster, not slower)
    env.check_solution = False
    policy_kwargs = {  # PolyNetPolicy's defaults, set explicitly from our config
        "embed_dim": sizes.embedding_dim,
        "num_encoder_layers": sizes.encoder_layers,
        "num_heads": sizes.num_heads,
        "feedforward_hidden": sizes.ff_hidden_dim,
        "normalization": "instance",
        "tanh_clipping": sizes.logit_clip,
    }
    with warnings.catch_warnings():  # Lightning's save_hyperparameters notes
        warnings.simplefilter("ignore")
        model = PolyNet(
            env,
            k=rollouts,
            encoder_type="AM",
            baseline="shared",
            policy_kwargs=policy_kwargs,
            batch_size=batch,
            optimizer="Adam",
            optimizer_kwargs={"lr": 1e-4},
        )
    return env, model


def to_rl4co(batch: Instance) -> object:
    """linc's CVRPTW batch as rl4co's generator TensorDict (horizon 1, travel time = distance)."""
    from tensordict import TensorDict

    # rl4co's scaling (its generator's scale=True): times in units of the horizon (rl4co checks
    # every instance against the first one's), coordinates so that travel time is distance
    horizon = batch.time_windows[:, 0, 1][:, None]
    locs = batch.locs * (batch.travel_time_scale[:, None] / horizon)[..., None]
    durations = batch.service_time / horizon
    windows = batch.time_windows / horizon[..., None]
    # rl4co masks a customer by its window alone; linc's env also by the return to the depot
    # in time: the latest start that still returns, as the window's end (the same problem)
    back = (locs - locs[:, :1]).norm(dim=-1)
    latest = windows[:, :1, 1] - durations - back
    end = torch.maximum(torch.minimum(windows[..., 1], latest), windows[..., 0])
    end[:, 0] = windows[:, 0, 1]
    return TensorDict(
        {
            "depot": locs[:, 0],
            "locs": locs[:, 1:],
            "demand": batch.demand[:, 1:] / batch.capacity[:, None],
            "durations": durations,
            "time_windows": torch.stack((windows[..., 0], end), -1),
        },
        batch_size=[batch.batch_size],
    )
