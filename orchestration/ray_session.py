"""The one way linc gets a Ray: join a cluster, or start a local Ray that listens on loopback.

Every entry point (``linc-generate``, the sweeps, the benchmarks, the test session) calls
:func:`init_ray`. Ray decides at import time whether a local node may expect other nodes
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``); only when it may not does it bind every socket to
127.0.0.1. :func:`prefer_loopback` sets that before ``ray`` is first imported, and this module
imports ``ray`` only inside :func:`init_ray`, after calling it.
"""

from __future__ import annotations

import os
from typing import Any

LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK = "127.0.0.1"


def prefer_loopback() -> None:
    """Make a local Ray bind to 127.0.0.1 only (unless ``$RAY_ADDRESS`` names a cluster).

    Effective only before the first ``import ray`` of the process (Ray reads it at import).
    """
    if not os.environ.get("RAY_ADDRESS"):
        os.environ.setdefault(LOOPBACK_SWITCH, "0")


def init_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    *,
    log_to_driver: bool = True,
    logging_level: str | None = None,
    keep_sigterm_handler: bool = False,
) -> bool:
    """Join ``address`` (else ``$RAY_ADDRESS``, as under ``ray job submit``) or start a local Ray.

    Args:
        address: a Ray address; ``"local"`` always starts a new local Ray of this process, even
            when ``$RAY_ADDRESS`` is set or another program's ``ray start`` head is up.
        num_cpus: CPUs of a local Ray (None: all).
        num_gpus: GPUs a local Ray declares (None: those it detects).
        log_to_driver: forward the workers' output to this process.
        logging_level: level of Ray's Python loggers here and in every worker (``WARNING``
            hides Ray's INFO lines; None: Ray's default).
        keep_sigterm_handler: leave this process's SIGTERM handler as it is (a sweep's, which
            stops it gracefully). ``ray.init`` puts its own first, ``sys.exit(15)``: a SIGTERM
            while Ray starts ended a driver with exit 15 and no line, or, landing in code that
            ignores exceptions (logging's lock release), was lost and the sweep ran on.

    Returns:
        True when this call started or joined Ray, False when it was already initialised.
    """
    prefer_loopback()
    import ray
    from ray._private import utils

    if ray.is_initialized():
        return False
    if keep_sigterm_handler:  # ray.init calls utils.set_sigterm_handler(its own)
        install, utils.set_sigterm_handler = utils.set_sigterm_handler, lambda handler: None
    try:
        return _init(ray, address, num_cpus, num_gpus, log_to_driver, logging_level)
    finally:
        if keep_sigterm_handler:
            utils.set_sigterm_handler = install


def _init(
    ray: Any,
    address: str | None,
    num_cpus: int | None,
    num_gpus: int | None,
    log_to_driver: bool,
    logging_level: str | None,
) -> bool:
    address = address or os.environ.get("RAY_ADDRESS")
    options: dict = {"log_to_driver": log_to_driver}
    if logging_level is not None:
        options["logging_config"] = ray.LoggingConfig(log_level=logging_level)
    if address and address != "local":
        ray.init(address=address, **options)
    else:
        from orchestration.experiment.ray_compat import (
            bind_loopback_even_if_imported_before,
            local_ray_in_its_own_session,
            quiet_token_auth_notice,
        )

        bind_loopback_even_if_imported_before(
            LOOPBACK_SWITCH
        )  # a process that imported ray before linc
        quiet_token_auth_notice()
        local_ray_in_its_own_session()  # a signal to the driver's group reaches the driver only
        # address="local": a new Ray of this process (another program's `ray start` head
        # would otherwise be joined through its address file)
        ray.init(
            address="local",
            _node_ip_address=LOOPBACK,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            **options,
        )
    from orchestration.experiment.ray_compat import (
        drop_ray_root_handler,
        quiet_ignored_worker_exits,
    )

    drop_ray_root_handler()
    quiet_ignored_worker_exits()
    return True


__all__ = ["LOOPBACK", "LOOPBACK_SWITCH", "init_ray", "prefer_loopback"]
