"""``linc-generate``: generate one data set with a pool of Ray actors (local or on a cluster).

    linc-generate task=cvrptw size=100 count=100000 shard_size=2000 split=train \
        uri=s3://bucket/linc/cvrptw100-train workers=8 cpus_per_worker=1

The config is composed from ``sweeps/conf/generate/generate.yaml`` plus the command-line overrides
(``sweeps.compose``: no working-directory change, no output folder), then built into a typed
:class:`~orchestration.data.definition.DatagenConfig`; a bad key or value exits 2 with one line.
Without ``RAY_ADDRESS`` a local Ray is started on 127.0.0.1 with ``num_cpus`` from the config;
under ``ray job submit`` (which sets ``RAY_ADDRESS``) the job joins the cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

from linc_core.utils.typed import build
from orchestration.data.definition import DatagenConfig
from sweeps.cli import run_cli
from sweeps.compose import compose_mapping


def load_config(overrides: Sequence[str] = ()) -> DatagenConfig:
    """Compose ``generate.yaml`` with ``overrides`` into a validated ``DatagenConfig``."""
    return build(DatagenConfig, compose_mapping(overrides, "generate"), "")


def generate(config: DatagenConfig) -> int:
    import ray

    from orchestration.data.generation import generate_dataset
    from orchestration.ray_session import init_ray

    init_ray(num_cpus=config.ray_cpus)
    try:
        manifest = generate_dataset(config)
    finally:
        ray.shutdown()
    counts = manifest["counts"]
    print(
        f"{config.uri.split('?', 1)[0]}: {counts['instances']} {config.task}{config.size} "
        f"instances in {counts['shards']} shards, manifest.json written"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``linc-generate``; ``argv`` are Hydra overrides (``key=value``)."""
    return run_cli(
        "linc-generate", argv, generate, load=load_config, config_name="generate", doc=__doc__
    )


if __name__ == "__main__":
    raise SystemExit(main())
