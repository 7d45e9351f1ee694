"""What one training run is: named training protocols and variant lists (``protocols``), the run
plan resolved once from a variant, a protocol and settings, and what realises it: training
data, validation and evaluation sets (``plan``), and the memory a run needs (``memory``).
"""
