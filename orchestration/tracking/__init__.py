"""The one way to MLflow: the store and its experiment (``store``), what a run logs as params
(``params``) and metrics (``fit_metrics``), the run writer that never raises into training
(``writer``) and what each of its records does to the store (``records``), the one tracking
object the driver resolves and hands down to every trial (``target``), and a sweep's runs seen
from the driver, parent run to settlement (``runs``: ``SweepRuns``).
"""
