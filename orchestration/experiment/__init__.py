"""The driver side of a sweep: its lifecycle in one object (``sweep``: :class:`Sweep`), the
sweep's folder (``folder``), Tune's sealed state (``tune_state``), pre-flight (``preflight``),
linc's Tune callbacks and how a sweep stops (``callbacks``), what the console shows
(``console``), every workaround of the pinned Ray (``ray_compat``), and the ablation
(``ablation``) and the search (``search``, ``study``) as thin callers.
``docs/architecture.md`` follows one sweep through them.
"""
