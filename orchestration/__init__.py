"""Ray, S3 and MLflow runtime for linc, one room per concern:

- ``config``: the typed platform config (its sections, and ``PlatformConfig``);
- ``data``: generated data sets (definition, Ray actors writing Parquet, local/S3 storage);
- ``trial``: what runs inside one Tune trial (plan, trainable, data-parallel training, final
  evaluation, checkpoints, preemption, resources);
- ``tracking``: the one way to MLflow (store, params and metrics, run writer, the tracking
  target handed down to trials, a sweep's runs: ``SweepRuns``);
- ``experiment``: the driver (``Sweep``, the sweep's folder, Tune's sealed state, pre-flight,
  Tune callbacks and stops, console, the pinned Ray's workarounds; ablation and search as its
  callers);
- ``failures``: how a sweep ends unfinished, one family of one-line errors with exit codes;
- ``report``: statistics, the ablation report, tables and figures from MLflow;
- ``ray_session``: the one way linc gets a Ray.

A trial's data walks one way: the driver resolves the sweep's config and its tracking target
once and hands both down; each trial resolves its own plan once on its worker.

Importing the package makes a local Ray bind to loopback
(:func:`~orchestration.ray_session.prefer_loopback`): Ray reads that switch when it is first
imported, and several rooms here import ``ray`` at module level, so it is set before any of them.
"""

from orchestration.ray_session import prefer_loopback

prefer_loopback()
