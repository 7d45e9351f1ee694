"""Mixed precision of a training step: which autocast dtype, and whether a gradient scaler.

``TrainConfig.precision`` names it; ``auto`` resolves once, from the device, to what the run
then uses (and logs): ``bf16`` on CUDA, ``fp32`` on CPU. The reasons:

- bf16 has float32's exponent range, so no loss scaling is needed and no step is skipped for an
  overflow; on GPUs with bf16 tensor cores (compute capability 8.0 and newer: A100, H100, ...)
  it runs at fp16's speed (``python -m bench.gpu`` measures both against fp32).
- fp16 needs a ``GradScaler`` (gradients below 6e-8 underflow) and is CUDA-only here.
- On CPU, autocast to bf16 runs the same code path (tested), but is slower than fp32 on CPUs
  without bf16 matrix units, hence ``auto`` keeps fp32 there.

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


def effective_precision(precision: str, device: str | torch.device) -> str:
    """``precision`` with ``auto`` resolved for ``device``: ``bf16`` on CUDA, ``fp32`` on CPU."""
    if precision != "auto":
        return precision
    return "bf16" if torch.device(device).type == "cuda" else "fp32"


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
    "FP32",
    "PRECISIONS",
    "MixedPrecision",
    "Precision",
    "effective_precision",
    "resolve_precision",
]
