"""The command-line entry points of linc_core (no Ray, MLflow or Hydra): ``linc-train``
(``train``), ``linc-eval`` (``evaluate``), ``linc-diagnose`` (``diagnose``), ``linc-solve``
(``solve``), ``linc-data`` (``data``), and the flags they share (``flags``).
"""
