"""Training throughput: samples/s (instance x rollout, forward + backward + optimiser step).

CVRPTW n=50, B=16, K=128 on CPU, our full_linc and baseline presets measured side by side
(interleaved repeats, median), plus rl4co's PolyNet on rl4co's CVRPTW env at the same size and
width when rl4co is installed (``bench_rl4co_polynet``).
"""

from __future__ import annotations

import statistics
import time

import torch

from linc_core.config import preset_configs
from linc_core.model import LincPolicy
from linc_core.train import train_step
from linc_core.train.data import generate


def _ours_step_seconds(preset: str, batch: int, rollouts: int, n: int, seed: int) -> tuple:
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


def bench_train(batch: int = 16, rollouts: int = 128, n: int = 50, repeats: int = 3) -> list[dict]:
    """Median samples/s of full_linc and baseline, interleaved, after one warm-up step each."""
    runners = {
        p: _ours_step_seconds(p, batch, rollouts, n, seed=0) for p in ("full_linc", "baseline")
    }
    for run in runners.values():
        run(0)
    seconds: dict[str, list[float]] = {p: [] for p in runners}
    for r in range(repeats):
        for preset, run in runners.items():
            seconds[preset].append(run(r + 1))
    samples = batch * rollouts
    rate = {p: samples / statistics.median(s) for p, s in seconds.items()}
    return [
        {
            "name": f"train samples/s full_linc (CVRPTW n={n}, B={batch}, K={rollouts})",
            "ours": rate["full_linc"],
            "peer": rate["baseline"],
            "peer_name": "our baseline preset (cost of LINC over baseline = 1/ratio - 1)",
            "ratio": rate["full_linc"] / rate["baseline"],
            "target": 0.8,
        }
    ]


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(bench_train())
