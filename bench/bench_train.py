"""Training throughput: samples/s (instance x rollout, forward + backward + optimiser step).

CVRPTW n=50, B=16, K=128 on CPU, measured side by side in one process with interleaved repeats
(median): our ``full_linc`` and ``baseline`` presets (``train_step``), and rl4co's PolyNet on
rl4co's own CVRPTW env at the same size, width and encoder/decoder sizes.

One rl4co step is exactly what its Lightning training step runs, minus the Trainer:
``PolyNet.shared_step(batch, 0, "train")`` (env reset, policy forward with ``num_starts=k`` and
``multisample=True``, Poppy loss with the shared baseline and best-rollout mask), then
``loss.backward()`` and an Adam step from ``PolyNet.configure_optimizers()``. Each side trains on
its own generator's instances (the data its training sees); both run fp32 without gradient
clipping (rl4co's ``RL4COTrainer`` would clip at 1.0 and ask for 16-bit mixed precision).
rl4co is installed for benchmarking only and is imported here, never by ``linc_core``.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable

import torch

from linc_core.config import ModelConfig, preset_configs
from linc_core.model import LincPolicy
from linc_core.train import train_step
from linc_core.train.data import generate

RL4CO_PEER = "rl4co 0.7.0 PolyNet on rl4co CVRPTWEnv"


def _ours_step_seconds(
    preset: str, batch: int, rollouts: int, n: int, seed: int
) -> Callable[[int], float]:
    """A function running one seeded ``train_step`` of ``preset`` and returning its seconds."""
    model, config = preset_configs(preset, "cvrptw", num_rollouts=rollouts, batch_size=batch)
    torch.manual_seed(seed)
    policy = LincPolicy(model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    instance = generate("cvrptw", batch, n, seed)

    def run(step: int) -> float:
        gen = torch.Generator().manual_seed(step)
        start = time.perf_counter()
        train_step(policy, optimizer, instance, config, 0.5, gen)
        return time.perf_counter() - start

    return run


def _rl4co_polynet(batch: int, rollouts: int, n: int, seed: int, sizes: ModelConfig) -> tuple:
    """rl4co's CVRPTW env, a PolyNet with k = ``rollouts`` and our sizes, and one raw batch."""
    from rl4co.envs import CVRPTWEnv
    from rl4co.models.zoo.polynet import PolyNet

    torch.manual_seed(seed)  # rl4co draws weights and instances from the global stream
    env = CVRPTWEnv(generator_params={"num_loc": n})
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
    # What a training dataloader yields: the generator's TensorDict; shared_step resets it.
    data = env.generator(batch_size=[batch])
    return env, model, data


def _rl4co_step_seconds(
    batch: int, rollouts: int, n: int, seed: int, sizes: ModelConfig
) -> Callable[[int], float]:
    """A function running one PolyNet training step (as Lightning's loop would) in seconds."""
    _, model, data = _rl4co_polynet(batch, rollouts, n, seed, sizes)
    optimizer = model.configure_optimizers()
    model.train()

    def run(step: int) -> float:
        torch.manual_seed(step)  # rl4co samples actions from the global stream
        batch_td = data.clone()
        start = time.perf_counter()
        with warnings.catch_warnings():  # self.log() without a Trainer only warns
            warnings.simplefilter("ignore")
            out = model.shared_step(batch_td, batch_idx=0, phase="train")
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        optimizer.step()
        return time.perf_counter() - start

    return run


def bench_train(
    batch: int = 16, rollouts: int = 128, n: int = 50, repeats: int = 3, peer: bool = True
) -> list[dict]:
    """Median samples/s of full_linc, baseline and (``peer``) rl4co PolyNet, interleaved.

    Every runner takes one warm-up step first; each repeat then runs all of them, rotating the
    order, so machine load falls on each alike.
    """
    sizes, _ = preset_configs("full_linc", "cvrptw")
    runners: dict[str, Callable[[int], float]] = {
        p: _ours_step_seconds(p, batch, rollouts, n, seed=0) for p in ("full_linc", "baseline")
    }
    if peer:
        runners["rl4co_polynet"] = _rl4co_step_seconds(batch, rollouts, n, 0, sizes)
    for run in runners.values():
        run(0)
    names = list(runners)
    seconds: dict[str, list[float]] = {p: [] for p in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(runners[name](r + 1))
    samples = batch * rollouts
    rate = {p: samples / statistics.median(s) for p, s in seconds.items()}
    size = f"CVRPTW n={n}, B={batch}, K={rollouts}"
    rows = []
    if peer:
        rows.append(
            {
                "name": f"train samples/s full_linc vs rl4co PolyNet ({size})",
                "ours": rate["full_linc"],
                "peer": rate["rl4co_polynet"],
                "peer_name": RL4CO_PEER,
                "ratio": rate["full_linc"] / rate["rl4co_polynet"],
                "target": 1.5,
            }
        )
    rows.append(
        {
            "name": f"train samples/s full_linc vs our baseline ({size})",
            "ours": rate["full_linc"],
            "peer": rate["baseline"],
            "peer_name": "our baseline preset (cost of LINC over baseline = 1/ratio - 1)",
            "ratio": rate["full_linc"] / rate["baseline"],
            "target": 0.8,
        }
    )
    return rows


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(bench_train())
