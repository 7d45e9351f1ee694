"""The driver side of a sweep: one runner of Tune experiments (``runner``), the ablation
(``ablation``) and the search (``search``) over it, how a sweep stops (``stopping``), Tune
schedulers (``schedulers``), pre-flight checks (``preflight``), trials killed for memory
(``memory_kills``) and what the console shows (``console``).
"""
