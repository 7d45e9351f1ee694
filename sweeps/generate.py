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

import sys
from collections.abc import Sequence

from linc_core.utils.typed import ConfigError, build
from orchestration.data.definition import DatagenConfig
from sweeps.cli import run_cli
from sweeps.compose import compose_mapping


def load_config(overrides: Sequence[str] = ()) -> DatagenConfig:
    """Compose ``generate.yaml`` with ``overrides`` into a validated ``DatagenConfig``."""
    return build(DatagenConfig, compose_mapping(overrides, "generate"), "")


def generate(config: DatagenConfig) -> int:
    """Generate the data set; a set that cannot be finished (a worker died, another set is
    there, a URI that cannot be used) ends in one line (exit 1), finished shards kept."""
    import ray

    from linc_core.utils.secrets import redact
    from orchestration.data.generation import DatagenError, generate_dataset
    from orchestration.data.storage import open_filesystem
    from orchestration.experiment.preflight import check_writable
    from orchestration.ray_session import init_ray

    try:  # a URI that cannot be used is refused before Ray starts
        open_filesystem(config.uri)
    except ValueError as err:
        raise ConfigError(f"uri: {err}") from None
    local = config.uri.removeprefix("file://")
    if "://" not in local:  # made and probed now; S3's are the actors' (their credentials)
        check_writable("uri", local)
    init_ray(num_cpus=config.ray_cpus, logging_level="WARNING")  # no INFO chatter
    try:
        manifest = generate_dataset(config)
    except (DatagenError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise  # the shell's own line, exit 2
        print(redact(f"linc-generate: {' '.join(str(err).split())}"), file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    counts = manifest["counts"]
    print(
        f"{redact(config.uri.split('?', 1)[0])}: {counts['instances']} {config.task}{config.size} "
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
