"""Hydra configs (``sweeps/conf``) and the job entry points: linc-generate, linc-tune,
linc-ablation, linc-hpo, linc-report and the demo."""
