"""Data set generation throughput: Ray actor pool scaling and Parquet write/read speed.

    python -m bench.bench_datagen [--quick]

* CVRPTW n=100 instances/s with 1 and 2 actors, steady state: actors are started and warmed up
  before the clock starts, then generate, serialise and write whole shards to a local folder
  (``ShardWorker.ensure_shard``, the code path of ``linc-generate``). The 2-actor row reports
  the scaling ratio over 1 actor (target 1.85x on 2 free cores).
* Parquet write MB/s (``instance_to_table`` + deterministic ``parquet_bytes`` + file write) and
  read MB/s (file read + page-checksum verification + ``table_to_instance``) of one shard,
  in the driver process. MB are file bytes (zstd-compressed).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

TARGET_SCALING = 1.85
# Rough floors for a healthy single core; ratio = ours / target.
TARGET_ACTOR_INSTANCES_PER_SECOND = 2_000.0
TARGET_WRITE_MB_PER_SECOND = 20.0
TARGET_READ_MB_PER_SECOND = 50.0


def _pool_throughput(workers: int, shards: int, shard_size: int, folder: Path) -> float:
    import ray

    from orchestration.data.definition import DatagenConfig
    from orchestration.data.generation import ShardWorker

    config = DatagenConfig(
        task="cvrptw",
        size=100,
        count=shards * shard_size,
        shard_size=shard_size,
        seed=workers,
        uri=str(folder),
        workers=workers,
        progress=False,
    )
    folder.mkdir(parents=True, exist_ok=True)
    actors = [ShardWorker.options(num_cpus=1).remote(str(folder), 3) for _ in range(workers)]
    try:
        ray.get([actor.pid.remote() for actor in actors])  # started and imported: warm
        specs = config.shard_specs()
        start = time.perf_counter()
        refs = [actors[k % workers].ensure_shard.remote(spec) for k, spec in enumerate(specs)]
        results = ray.get(refs)
        elapsed = time.perf_counter() - start
    finally:
        for actor in actors:
            ray.kill(actor)
    return sum(r.rows for r in results) / elapsed


def _parquet_speed(shard_size: int, repeats: int, folder: Path) -> tuple[float, float]:
    from linc_core.instances.datasets import read_shard
    from linc_core.instances.parquet import instance_to_table, parquet_bytes
    from linc_core.problems.cvrptw import generate_cvrptw_envelope

    instance = generate_cvrptw_envelope(shard_size, 100, seed=0)
    path = folder / "speed.parquet"
    writes, reads = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        data = parquet_bytes(instance_to_table(instance))
        path.write_bytes(memoryview(data))
        writes.append(time.perf_counter() - start)
        start = time.perf_counter()
        read_shard(str(path))
        reads.append(time.perf_counter() - start)
    megabytes = path.stat().st_size / 1e6
    return megabytes / statistics.median(writes), megabytes / statistics.median(reads)


def bench_datagen(quick: bool = False) -> list[dict]:
    """Rows ``{"name", "ours", "peer"?, "ratio", "target"}``, as ``bench/__main__`` prints."""
    import ray

    from orchestration.ray_session import init_ray

    started_here = init_ray("local", num_cpus=2, log_to_driver=False)
    shard_size = 1000  # linc-generate's default: per-shard fixed costs as users pay them
    shards = 8 if quick else 24  # per run: >= 1 s of work, so dispatch overhead is noise
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # interleaved repeats, medians: one run is short and a busy host skews single runs
            ones, twos = [], []
            for repeat in range(1 if quick else 3):
                folder = Path(tmp) / f"repeat{repeat}"
                ones.append(_pool_throughput(1, shards // 2, shard_size, folder / "one"))
                twos.append(_pool_throughput(2, shards, shard_size, folder / "two"))
            one, two = statistics.median(ones), statistics.median(twos)
            write_mb, read_mb = _parquet_speed(1000, 3 if quick else 5, Path(tmp))
    finally:
        if started_here:
            ray.shutdown()
    scaling = two / one
    label = f"CVRPTW n=100, shards of {shard_size}, local folder"
    return [
        {
            "name": f"datagen instances/s, 1 actor ({label})",
            "ours": one,
            "ratio": one / TARGET_ACTOR_INSTANCES_PER_SECOND,
            "target": TARGET_ACTOR_INSTANCES_PER_SECOND,
        },
        {
            "name": "datagen instances/s, 2 actors vs 1 actor (ratio = scaling)",
            "ours": two,
            "peer": one,
            "peer_name": "the same pool with 1 actor, same run",
            "ratio": scaling,
            "target": TARGET_SCALING,
        },
        {
            "name": "Parquet write MB/s (CVRPTW n=100 shard of 1000, zstd, to table+file)",
            "ours": write_mb,
            "ratio": write_mb / TARGET_WRITE_MB_PER_SECOND,
            "target": TARGET_WRITE_MB_PER_SECOND,
        },
        {
            "name": "Parquet read MB/s (CVRPTW n=100 shard of 1000, CRC-checked, to Instance)",
            "ours": read_mb,
            "ratio": read_mb / TARGET_READ_MB_PER_SECOND,
            "target": TARGET_READ_MB_PER_SECOND,
        },
    ]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.bench_datagen")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    for row in bench_datagen(quick=args.quick):
        print(
            f"{row['name']:<90} {row['ours']:10.1f}  ratio {row['ratio']:.2f}  "
            f"target {row['target']:g}"
        )
