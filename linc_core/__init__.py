"""linc_core: the LINC policy, its environments, training, decoding and evaluation.

Pure torch/numpy: never imports ray, mlflow, hydra, optuna or boto3. A notebook needs one
import::

    import linc_core as lc

    model_config, train_config = lc.preset_configs("full_linc", "cvrptw", batch_size=16)
    policy = lc.LincPolicy(model_config)
    data = lc.GeneratedData.for_training("cvrptw", 20, train_config, seed=1)
    lc.fit(policy, train_config, data, callbacks=[lc.PrintProgress()])
    _, c101 = lc.read_instance(Path("C101.txt"))
    result = lc.decode(policy, c101, lc.DecodeConfig(method="sampling", num_z=64, augment=8))
    lc.verify_instance(c101, 0, result.routes[0])

The names below are the notebook's (configs, presets, the policy, ``fit`` and its data,
``decode``, ``verify``, readers, checkpoints, and ``tune_cpu_allocator``, the process setting
the command lines make). They are imported on first use, so that
``import linc_core.utils.typed`` (as the command lines do) does not load the model. The rest is
grouped by concern: ``instances`` (the batch type, readers, Parquet, benchmark data),
``problems`` (environments, rollout engine, generators), ``model``, ``train``, ``decoding``,
``evaluate`` (benchmark evaluation, PyVRP, diagnostics), ``verify``, ``runs`` (protocols and
the run plan), ``commands`` (the command lines) and ``utils``.
"""

from __future__ import annotations

from linc_core.utils.lazy import lazy_exports

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC: dict[str, str] = {
    "ModelConfig": "linc_core.config",
    "TrainConfig": "linc_core.config",
    "DecodeConfig": "linc_core.decoding",
    "PRESETS": "linc_core.presets",
    "ABLATION_VARIANTS": "linc_core.presets",
    "preset_configs": "linc_core.presets",
    "Preset": "linc_core.presets",
    "register_preset": "linc_core.presets",
    "LincPolicy": "linc_core.model",
    "fit": "linc_core.train",
    "PrintProgress": "linc_core.train",
    "GeneratedData": "linc_core.train",
    "FixedData": "linc_core.train",
    "policy_from_checkpoint": "linc_core.train",
    "decode": "linc_core.decoding",
    "verify_instance": "linc_core.verify",
    "verify_routes": "linc_core.verify",
    "Instance": "linc_core.instances",
    "read_instance": "linc_core.instances.any_file",
    "read_instance_text": "linc_core.instances.any_file",
    "load_benchmark": "linc_core.evaluate.benchmark_sets",
    "tune_cpu_allocator": "linc_core.utils.runtime",
}

__all__ = ["__version__", *_PUBLIC]


__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
