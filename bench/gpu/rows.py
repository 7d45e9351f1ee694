"""What every section of the GPU check shares: its row type, its models, timing, the data.

A row is one figure: a name, a value with its unit, a status (``pass``, ``FAIL``, ``info``,
``not run``) and a detail (what was compared, the tolerance, why a row did not run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from linc_core.config import ModelConfig, TrainConfig
from linc_core.instances import Instance, read_solomon, truncate_customers
from linc_core.instances.benchmarks import data_dir
from linc_core.model import LincPolicy
from linc_core.presets import variant_configs

PASS, FAIL, INFO, NOT_RUN = "pass", "FAIL", "info", "not run"

# A smaller encoder for the comparisons: every variant's switches, a fraction of the time.
SMALL_MODEL: dict[str, Any] = {
    "embedding_dim": 64,
    "encoder_layers": 3,
    "num_heads": 4,
    "ff_hidden_dim": 256,
    "poly_hidden_dim": 128,
    "scorer_hidden_dim": 64,
}


@dataclass
class Row:
    """One line of the table (and one entry of the JSON file)."""

    section: str
    name: str
    value: float | None = None
    unit: str = ""
    status: str = INFO
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "status": self.status,
            "detail": self.detail,
            **({"extra": self.extra} if self.extra else {}),
        }


def not_run(section: str, name: str, why: str = "no CUDA device") -> Row:
    return Row(section, name, status=NOT_RUN, detail=why)


@dataclass(frozen=True)
class CheckContext:
    """Where the check runs: the device under test (``cuda`` or ``cpu``) and its size."""

    device: torch.device
    quick: bool

    @property
    def has_cuda(self) -> bool:
        return self.device.type == "cuda"


def variant_setup(
    variant: str, small: bool = True, **train: Any
) -> tuple[ModelConfig, TrainConfig]:
    """A variant's CVRPTW configs (``SMALL_MODEL`` sizes unless ``small`` is False)."""
    return variant_configs(variant, "cvrptw", train=train, model=SMALL_MODEL if small else None)


def seeded_policy(model: ModelConfig, seed: int = 0) -> LincPolicy:
    """A policy with PyTorch's default initialisation under ``seed`` (on CPU)."""
    torch.manual_seed(seed)
    return LincPolicy(model)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, run: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of ``run()``, the device's queue drained before and after."""
    synchronize(device)
    began = time.perf_counter()
    result = run()
    synchronize(device)
    return time.perf_counter() - began, result


@contextmanager
def peak_memory(device: torch.device) -> Iterator[dict[str, float]]:
    """Yields a dict that holds ``gib``, the peak GPU memory allocated inside the block."""
    out = {"gib": float("nan")}
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    yield out
    if device.type == "cuda":
        out["gib"] = torch.cuda.max_memory_allocated(device) / 2**30


def solomon(names: tuple[str, ...] | None = None, customers: int | None = None) -> Instance:
    """Solomon-100 instances (all 56 when ``names`` is None), cut to ``customers``."""
    folder = data_dir() / "solomon100"
    if names is None:
        paths = sorted(folder.glob("*.txt"))
    else:
        paths = [folder / f"{name}.txt" for name in names]
    if not paths or not all(p.is_file() for p in paths):
        raise FileNotFoundError(
            f"Solomon-100 files not found under {folder} (set LINC_DATA_DIR to the folder "
            f"that holds solomon100/)"
        )
    batch = Instance.concat([read_solomon(path) for path in paths])
    return batch if customers is None else truncate_customers(batch, customers)


def flat_gradient(policy: torch.nn.Module) -> torch.Tensor:
    """Every parameter's gradient (0 where none) as one float64 CPU vector."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in policy.parameters()]
    return torch.cat([g.detach().double().flatten() for g in grads]).cpu()


def relative_difference(a: torch.Tensor | float, b: torch.Tensor | float) -> float:
    """``max |a - b| / max(max |b|, tiny)`` as a float (tensors or scalars)."""
    a_t = torch.as_tensor(a, dtype=torch.float64).cpu()
    b_t = torch.as_tensor(b, dtype=torch.float64).cpu()
    scale = max(float(b_t.abs().max()), 1e-300)
    return float((a_t - b_t).abs().max()) / scale


__all__ = [
    "FAIL",
    "INFO",
    "NOT_RUN",
    "PASS",
    "SMALL_MODEL",
    "CheckContext",
    "Row",
    "flat_gradient",
    "not_run",
    "peak_memory",
    "relative_difference",
    "seeded_policy",
    "solomon",
    "synchronize",
    "timed",
    "variant_setup",
]
