"""Peak memory of one training epoch at the ablation protocol's settings.

    python -m bench --only memory

CVRPTW on the Solomon-50 set (n = 50, B = 56, K = 128, one thread), the epoch taken at progress
0, where every rollout carries credit (dense: the step that used to keep the autograd graph of
all K x T decisions; 7.2 GB for full_linc and 24.3 GB for naive_mlp before the chunked replay).
Each preset runs in a fresh child process, so its peak resident set size (``VmHWM``, through
``linc_core.utils.runtime.peak_rss_gb``: ``ru_maxrss`` would carry the bench process's own
size across the ``exec``) is its own; the allocator is tuned as ``linc-train`` tunes it.
Target: at most 2.5 GB each. The row also reports the epoch's samples/s (instances x
rollouts per second).
"""

from __future__ import annotations

import json
import subprocess
import sys

PRESETS = ("full_linc", "naive_mlp")
TARGET_GB = 2.5


def _child(preset: str) -> None:
    """Run one protocol epoch (one batch of all 56 instances) and print its numbers as JSON."""
    import time

    import torch

    from linc_core.runs.plan import DataSource, resolve_run, training_data
    from linc_core.train.loop import initial_policy
    from linc_core.train.step import train_step
    from linc_core.utils.runtime import peak_rss_gb, tune_cpu_allocator

    tune_cpu_allocator()
    torch.set_num_threads(1)
    plan = resolve_run(preset, DataSource("solomon50"), protocol="ablation", train={"seed": 1234})
    batch = training_data(plan).batch(0, 0)
    policy = initial_policy(plan.model, plan.train)
    optimizer = torch.optim.Adam(policy.parameters(), lr=plan.train.learning_rate)
    started = time.perf_counter()
    train_step(policy, optimizer, batch, plan.train, 0.0, 0)
    seconds = time.perf_counter() - started
    samples = batch.batch_size * plan.train.num_rollouts
    print(json.dumps({"seconds": seconds, "peak_gb": peak_rss_gb(), "samples": samples}))


def bench_memory(quick: bool = False) -> list[dict]:
    rows = []
    for preset in PRESETS[:1] if quick else PRESETS:
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_memory", preset],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        measured = json.loads(out.strip().splitlines()[-1])
        rows.append(
            {
                "name": f"peak RSS GB of a protocol epoch, {preset} (n=50, B=56, K=128, dense), "
                f"{measured['samples'] / measured['seconds']:.0f} samples/s",
                "ours": measured["peak_gb"],
                "ratio": measured["peak_gb"] / TARGET_GB,
                "target": TARGET_GB,
            }
        )
    return rows


if __name__ == "__main__":
    _child(sys.argv[1])
