"""Small utilities every part of linc_core shares: atomic file writes (``atomic``), progress of
long loops (``progress``), PNG figures (``plotting``), derivable seeds (``seeding``), process
settings of torch workloads (``runtime``) and the typed mapping-to-dataclass builder (``typed``).
"""
