"""``linc-generate``: generate one data set with a pool of Ray actors (local or on a cluster).

    linc-generate task=cvrptw size=100 count=100000 shard_size=2000 split=train \
        uri=s3://bucket/linc/cvrptw100-train workers=8 cpus_per_worker=1

The config is composed with Hydra from ``sweeps/conf/generate.yaml`` plus the command-line
overrides (no working-directory change, no output folder), then checked into a typed
:class:`~orchestration.datagen.DatagenConfig`. Without ``RAY_ADDRESS`` a local Ray is started
on 127.0.0.1 with ``num_cpus`` from the config; under ``ray job submit`` (which sets
``RAY_ADDRESS``) the job joins the cluster with a plain ``ray.init()``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def load_config(overrides: Sequence[str] = ()):
    """Compose ``generate.yaml`` with ``overrides`` into a validated ``DatagenConfig``."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from orchestration.datagen import DatagenConfig

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        composed = compose(config_name="generate", overrides=list(overrides))
    return DatagenConfig.from_mapping(OmegaConf.to_container(composed, resolve=True))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``linc-generate``; ``argv`` are Hydra overrides (``key=value``)."""
    on_cluster = bool(os.environ.get("RAY_ADDRESS"))
    if not on_cluster:
        # Local Ray binds its sockets to 127.0.0.1 only when it does not expect other nodes;
        # read when ray is first imported, hence before the imports below.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    from orchestration.datagen import DatagenConfigError, generate_dataset

    try:
        config = load_config(sys.argv[1:] if argv is None else argv)
    except DatagenConfigError as err:
        raise SystemExit(f"linc-generate: {err}") from None
    if on_cluster:
        ray.init()
    else:
        ray.init(address="local", num_cpus=config.ray_cpus, include_dashboard=False)
    try:
        manifest = generate_dataset(config)
    finally:
        ray.shutdown()
    counts = manifest["counts"]
    print(
        f"{config.uri.split('?', 1)[0]}: {counts['instances']} {config.task}{config.size} "
        f"instances in {counts['shards']} shards, manifest.json written"
    )


if __name__ == "__main__":
    main()
