"""linc_core: LINC routing environments, generators, instance I/O, verifier and PyVRP solver.

Pure torch/numpy: never imports ray, mlflow, hydra, optuna or boto3.
"""

__version__ = "0.1.0"
