"""Everything that runs inside one Tune trial: its plan, resolved once on the worker (``plan``),
the trainable (``trainable``), data-parallel training over Ray Train (``data_parallel``), the
final evaluation (``evaluation``), the trial's checkpoints on storage (``checkpoints``),
SIGTERM handling (``preemption``) and the resources a trial reserves (``resources``).
"""
