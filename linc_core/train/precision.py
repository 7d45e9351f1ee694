"""Mixed precision of a training step: which autocast dtype, and whether a gradient scaler.

``TrainConfig.precision`` names it; ``auto`` resolves once, from the device, to what the run
then uses (and logs): ``fp32`` on CUDA and on CPU, the faster where measured. The reasons:

- On an H200 (``python -m bench.gpu``, 2026-11-26) a training step at the paper's size (n=100,
  B=128, K=128) took 443 ms in fp32 and 766 ms under bf16 autocast (full_linc; the baseline
  436 and 748 ms); at n=50, B=32, K=32 bf16 ran at 0.75-1.01x fp32's speed. The model is small
  (d=128) and a step is thousands of small kernels, so the casts autocast adds cost more than
  the tensor cores save. bf16 keeps fp32's final quality (0.1% on a 200-step curve), and has
  float32's exponent range (no loss scaling); set it where it pays (larger models).
- fp16 needs a ``GradScaler`` (gradients below 6e-8 underflow) and is CUDA-only here.
- On CPU, autocast to bf16 runs the same code path (tested), with attention in float32
  (``linc_core.model.encoder.attention``: PyTorch's bf16 CPU attention is 7-10x slower
  backward). On a CPU with AMX tiles (2026-11-28) bf16 linear layers ran 4.7-6x as fast as
  fp32, yet a full_linc training step was 0.96-1.00x as fast (``python -m bench --only
  train``): the rest of the step takes back what the matrix units save.

Autocast covers the forward passes (encoder, rollouts, the replay's recomputation); the backward
pass runs outside it, as PyTorch recommends. The rollouts' random draws and the advantage use
float64 / float32 whatever the precision (``linc_core.model.sampling``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# What ``auto`` becomes per device type: the precision measured faster there.
AUTO = {"cuda": "fp32", "cpu": "fp32"}


def effective_precision(precision: str, device: str | torch.device) -> str:
    """``precision`` with ``auto`` resolved for ``device``: the faster measured there
    (``AUTO``; fp32 on both CUDA and CPU, see the module's notes)."""
    if precision != "auto":
        return precision
    return AUTO.get(torch.device(device).type, "fp32")


@dataclass(frozen=True)
class MixedPrecision:
    """How a training step computes: the autocast dtype (None: fp32) on ``device_type``.

    Attributes:
        name: ``fp32``, ``bf16`` or ``fp16`` (never ``auto``).
        device_type: ``cpu`` or ``cuda``.
    """

    name: str
    device_type: str

    @property
    def dtype(self) -> torch.dtype | None:
        return _DTYPES.get(self.name)

    @property
    def needs_scaler(self) -> bool:
        return self.name == "fp16"

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the step's forward passes run in (a no-op for fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """A new ``GradScaler`` for fp16, else None."""
        return torch.amp.GradScaler(self.device_type) if self.needs_scaler else None


FP32 = MixedPrecision("fp32", "cpu")


def resolve_precision(precision: str, device: str | torch.device) -> MixedPrecision:
    """The ``MixedPrecision`` a run on ``device`` uses for setting ``precision``.

    Raises:
        ValueError: an unknown name, or ``fp16`` on a device other than CUDA.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"train.precision: expected one of {PRECISIONS}, got {precision!r}")
    device_type = torch.device(device).type
    name = effective_precision(precision, device)
    if name == "fp16" and device_type != "cuda":
        raise ValueError(f"train.precision: fp16 needs a CUDA device, got device {device}")
    return MixedPrecision(name, device_type)


__all__ = [
    "AUTO",
    "FP32",
    "PRECISIONS",
    "MixedPrecision",
    "Precision",
    "effective_precision",
    "resolve_precision",
]
