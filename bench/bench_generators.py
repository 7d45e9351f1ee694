"""Envelope-generator throughput: CVRPTW instances per second on one thread.

Run ``python bench/bench_generators.py``. Thread counts are pinned to 1 before numpy and
torch load, so the figure is per core and comparable across machines. A data-generation
worker (one Ray actor per core) sees the same rate.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

from linc_core.problems.cvrptw import generate_cvrptw_envelope  # noqa: E402
from linc_core.utils.seeding import derive_seed  # noqa: E402

TARGET_INSTANCES_PER_SECOND = 10_000.0


def bench_envelope(
    n: int = 100, instances: int = 4096, seconds: float = 3.0, min_repeats: int = 5
) -> dict:
    """Median throughput of ``generate_cvrptw_envelope`` over repeated fixed-seed batches.

    Args:
        n: customers per instance.
        instances: batch size of one generator call.
        seconds: keep repeating until this much time has been measured ...
        min_repeats: ... and at least this many calls were timed.

    Returns:
        ``{"name", "ours" (median instances/s), "samples" (per call), "target",
        "ratio" (ours / target)}``.
    """
    torch.set_num_threads(1)
    generate_cvrptw_envelope(min(instances, 64), n, seed=0)  # warm-up: imports, allocator
    rates: list[float] = []
    spent = 0.0
    repeat = 0
    while spent < seconds or repeat < min_repeats:
        seed = derive_seed(1234, "bench", "envelope", n, repeat)
        start = time.perf_counter()
        generate_cvrptw_envelope(instances, n, seed=seed)
        elapsed = time.perf_counter() - start
        rates.append(instances / elapsed)
        spent += elapsed
        repeat += 1
    median = statistics.median(rates)
    return {
        "name": f"CVRPTW envelope generator instances/s (n={n}, batch={instances}, 1 thread)",
        "ours": median,
        "samples": rates,
        "target": TARGET_INSTANCES_PER_SECOND,
        "ratio": median / TARGET_INSTANCES_PER_SECOND,
    }


if __name__ == "__main__":
    for batch in (4096, 128):
        result = bench_envelope(n=100, instances=batch)
        print(
            f"{result['name']}: {result['ours']:,.0f} instances/s "
            f"(target {result['target']:,.0f}, x{result['ratio']:.2f}, "
            f"{len(result['samples'])} repeats)"
        )
