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

from linc_core.config import ModelConfig
from linc_core.model import LincPolicy
from linc_core.plan import DataSource, RunPlan, resolve_run
from linc_core.train import train_step
from linc_core.train.data import generate

RL4CO_PEER = "rl4co 0.7.0 PolyNet on rl4co CVRPTWEnv"


def _plan(preset: str, batch: int, rollouts: int, n: int) -> RunPlan:
    """The run a preset trains at this size: its effective model and training configs."""
    train = {"num_rollouts": rollouts, "batch_size": batch}
    return resolve_run(preset, DataSource("generated", "cvrptw", n), train=train)


def _ours_step_seconds(
    preset: str,
    batch: int,
    rollouts: int,
    n: int,
    seed: int,
    *,
    train_preset: str | None = None,
    progress: float = 0.5,
) -> Callable[[int], float]:
    """A function running one seeded ``train_step`` of ``preset`` and returning its seconds.

    ``train_preset`` takes the training settings (credit, rollout mask) from another preset;
    ``progress`` is the point of training the step is taken at.
    """
    plan = _plan(preset, batch, rollouts, n)
    model, config = plan.model, plan.train
    if train_preset is not None:
        config = _plan(train_preset, batch, rollouts, n).train
    torch.manual_seed(seed)
    policy = LincPolicy(model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    instance = generate("cvrptw", batch, n, seed)

    def run(step: int) -> float:
        gen = torch.Generator().manual_seed(step)
        start = time.perf_counter()
        train_step(policy, optimizer, instance, config, progress, gen)
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
    """Median samples/s of our presets and (``peer``) rl4co PolyNet, interleaved.

    Steps are taken at 50% of training, where full_linc's best-only mask applies (from 25% on
    by default) and the baseline preset trains every rollout (its dense group-mean credit). Two
    more pairs separate the model's cost from the credit's: the baseline model under
    full_linc's training settings, and both presets at 0% (before best-only: every rollout
    trains). Every runner takes one warm-up step first; each repeat then runs all of them,
    rotating the order, so machine load falls on each alike.
    """
    sizes = _plan("full_linc", batch, rollouts, n).model
    runners: dict[str, Callable[[int], float]] = {
        "full_linc": _ours_step_seconds("full_linc", batch, rollouts, n, 0),
        "baseline": _ours_step_seconds("baseline", batch, rollouts, n, 0),
        "baseline_model_linc_credit": _ours_step_seconds(
            "baseline", batch, rollouts, n, 0, train_preset="full_linc"
        ),
        "full_linc_dense": _ours_step_seconds("full_linc", batch, rollouts, n, 0, progress=0.0),
        "baseline_dense": _ours_step_seconds("baseline", batch, rollouts, n, 0, progress=0.0),
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

    def row(name: str, ours: str, peer_key: str, peer_name: str, target: float | None) -> dict:
        return {
            "name": f"{name} ({size})",
            "ours": rate[ours],
            "peer": rate[peer_key],
            "peer_name": peer_name,
            "ratio": rate[ours] / rate[peer_key],
            "target": target,
        }

    rows = []
    if peer:
        rows.append(
            row(
                "train samples/s full_linc vs rl4co PolyNet",
                "full_linc",
                "rl4co_polynet",
                RL4CO_PEER,
                1.5,
            )
        )
    rows.append(
        row(
            "train samples/s full_linc vs our baseline",
            "full_linc",
            "baseline",
            "our baseline preset, each with its own credit (cost of LINC = 1/ratio - 1)",
            0.8,
        )
    )
    rows.append(
        row(
            "  model cost: full_linc vs baseline model, both best-only",
            "full_linc",
            "baseline_model_linc_credit",
            "the baseline model under full_linc's training settings",
            None,
        )
    )
    rows.append(
        row(
            "  model cost: full_linc vs baseline at 0% (every rollout trains)",
            "full_linc_dense",
            "baseline_dense",
            "both presets before the best-only mask",
            None,
        )
    )
    return rows
