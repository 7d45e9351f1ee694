"""Reports from a sweep's MLflow runs: ablation statistics with intervals (``statistics``), the
ablation report (``ablation``), the paper-shaped tables (``tables``) and the figures
(``figures``).
"""
