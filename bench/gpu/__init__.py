"""The GPU check: ``python -m bench.gpu`` runs linc's GPU path and prints one table.

It needs ``linc_core`` with its small dependencies only (torch, numpy, pyarrow, vrplib: never
Ray, MLflow, Optuna or Hydra), so it runs from a checkout on a bare GPU machine. Sections:

- ``correctness``: one training step of each of the paper's twelve ablation variants on CUDA
  against the same step on CPU (same weights, batch and seed: the draws are keyed, so both
  devices sample the same rollouts), in float64 (the gate: same rollouts, loss and gradients
  to rounding) and float32 (reported); greedy, sampling and SGBS decodes on both devices, with
  every decoded solution verified by ``linc_core.verify``.
- ``precision``: bf16 autocast and fp16 with a gradient scaler against fp32, one step and a
  few hundred steps of training from the same weights.
- ``sync``: the decoding loop and a training step under ``torch.cuda.set_sync_debug_mode``:
  host-device synchronisations per decoding step.
- ``throughput``: training samples/s at n=100 (full_linc, baseline), z=800 x8 decoding of the
  56 Solomon-100 instances (the paper: 6 s), peak GPU memory of z=800 x8 on a 200-customer
  instance, the epoch time of the paper's training settings, and ``torch.compile`` of the
  decoding step against eager.

Without CUDA (``--device cpu``, CI) every section runs what it can on the CPU (the CPU side of
the comparisons, bf16 autocast on CPU) and marks the GPU rows ``not run``. The table's figures
also go to a JSON file (``--out``).
"""
