"""linc_core: the LINC policy, its environments, training, decoding and evaluation.

Pure torch/numpy: never imports ray, mlflow, hydra, optuna or boto3. A notebook starts from
``linc_core.config`` (``ModelConfig``, ``TrainConfig``), ``linc_core.presets``
(``preset_configs``: the ablation variants), ``linc_core.model`` (``LincPolicy``),
``linc_core.train`` (``fit``), ``linc_core.decode`` (``decode``) and ``linc_core.verify``. The
rest is grouped by concern: ``instances`` (the batch type, readers, Parquet, benchmark data),
``problems`` (environments, rollout engine, generators), ``evaluate`` (benchmark evaluation,
PyVRP, diagnostics), ``runs`` (protocols and the run plan), ``commands`` (the command lines) and
``utils``.
"""

__version__ = "0.1.0"
