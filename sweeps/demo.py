"""``make demo``: the main job on the embedded defaults (local Ray, local MLflow, local Parquet).

1. Ray actors generate a small CVRPTW training set as Parquet shards (``data/demo-...``).
2. The twelve-variant ablation trains on it with the ``cpu`` preset on a local Ray, each trial
   an MLflow run nested under the sweep; every final policy is evaluated on Solomon-50.
3. The paper-shaped ablation table is printed with the ``mlflow ui`` command that shows the runs.

Any platform override works here too, e.g. ``python -m sweeps.demo preset=smoke``. Re-running
reuses the data set (verified against its manifest) and resumes the sweep.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from sweeps.cli import print_mlflow_ui, run_cli

DEMO_DATA = {"count": 2048, "shard_size": 256, "split": "train", "seed": 20261122}


def demo(config) -> int:
    from linc_core.utils.typed import build
    from orchestration.config.platform import PlatformConfig
    from orchestration.data.definition import DatagenConfig
    from orchestration.data.generation import generate_dataset
    from orchestration.experiment.ablation import run_ablation
    from orchestration.experiment.sweep import start_ray

    started = time.perf_counter()
    task = config.run.data
    uri = task.uri or str(Path("data").resolve() / f"demo-{task.problem}{task.num_customers}-train")
    start_ray(config)
    datagen = build(
        DatagenConfig,
        DEMO_DATA
        | {"task": task.problem, "size": task.num_customers, "uri": uri, "workers": 2}
        | {"cpus_per_worker": 1.0},
        "",
    )
    manifest = generate_dataset(datagen)
    print(
        f"data: {manifest['counts']['instances']} {task.problem}{task.num_customers} instances "
        f"in {manifest['counts']['shards']} Parquet shards at {uri} "
        f"({time.perf_counter() - started:.0f}s)",
        flush=True,
    )
    config = PlatformConfig.from_mapping(
        config.with_values(**{"data.source": "dataset", "data.uri": uri})
    )
    result = run_ablation(config)
    print(f"demo: data and sweep in {time.perf_counter() - started:.0f} s\n\n{result.table}")
    seeds = len(config.ablation.seeds)
    print(
        f"\n{seeds} seed(s) x {config.run.train.epochs} epochs: a smoke-scale check of the "
        "platform, not a result; the protocol run is linc-ablation preset=cpu-repro "
        "'ablation.seeds=[1234,42,2026]' (docs: Sweeps, Ablation)."
    )
    print_mlflow_ui(result.tracking_uri, result.parent_run_id, result.registered)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("linc-demo", argv, demo, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
