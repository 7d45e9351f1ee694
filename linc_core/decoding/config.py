"""``DecodeConfig``: the typed, validated knobs of every decoding method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

DecodeMethod = Literal["greedy", "sampling", "sgbs", "multistart"]
DECODE_METHODS: tuple[str, ...] = ("greedy", "sampling", "sgbs", "multistart")
AUGMENTATIONS: tuple[int, ...] = (1, 8)
# Rollouts decoded at once by default, per device type: a GPU works on all rows of a step at
# once, so larger chunks mean fewer, fuller steps; on a CPU core 8192 measured faster than
# 16384 (DecodeConfig's notes).
ROLLOUTS_PER_CHUNK = {"cpu": 8192, "cuda": 65536}


@dataclass(frozen=True)
class DecodeConfig:
    """How to decode a batch of instances.

    Attributes:
        method: ``greedy`` (argmax per rollout), ``sampling`` (softmax sampling per rollout),
            ``multistart`` (POMO: one greedy rollout per forced first customer) or ``sgbs``
            (simulation-guided beam search, reference section 6).
        num_z: rollouts per augmented copy for ``greedy`` and ``sampling``, each conditioned on
            its own z-vector when the model has ``z_dim > 0`` (the paper's budget is 800). A
            model without z decodes ``greedy`` with a single rollout (identical rollouts would
            only repeat it).
        augment: 1 (the instance as given) or 8 (the dihedral copies, each with its own z).
        seed: every random draw (z-vectors, sampling) derives from it; see ``decode``.
        num_starts: ``multistart`` rollouts per copy (None = every customer / city).
        beam_width: SGBS beams kept per augmented copy (reference: 4).
        expansion: SGBS children per beam, the greedy child included (reference: 4).
        sgbs_z: greedy z-rollouts whose best ``beam_width`` seed the SGBS beams (reference:
            128); for a model without z, that many POMO starts (capped at the customer count).
        max_rollouts_per_chunk: upper bound on rollouts decoded at once (instances x copies x
            rollouts per chunk); decoding memory grows linearly with it and with n. None (the
            default): ``ROLLOUTS_PER_CHUNK`` for the model's device, 8192 on CPU and 65536 on
            CUDA (the 56 Solomon-100 at z=800 x8 on an H200: 11.8 s at 16384, 4.0 s and 0.8
            GiB at 65536, 3.7 s and 3.4 GiB all at once; on one core of a 2-core AMD EPYC, 12
            of them in 100-102 s at 8192 against 124-125 s at 16384, and SGBS on all 56 held at
            most 918 MiB above its start at 8192 against 4,366 MiB at 16384, in as long).
            Results do not depend on it.
        compile: decode with the decision step under ``torch.compile`` (one graph, inductor on
            CPU, CUDA graphs on CUDA: ``linc_core.utils.compiling``), every rollout decided at
            every step. Same solutions as eager up to float rounding of the fused arithmetic;
            its compile time is paid once per chunk shape and process (docs/how-to/gpu.md,
            Compiled steps).
    """

    method: DecodeMethod = "sampling"
    num_z: int = 800
    augment: int = 8
    seed: int = 0
    num_starts: int | None = None
    beam_width: int = 4
    expansion: int = 4
    sgbs_z: int = 128
    max_rollouts_per_chunk: int | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        if self.method not in DECODE_METHODS:
            raise ValueError(
                f"DecodeConfig.method: expected one of {DECODE_METHODS}, got {self.method!r}"
            )
        if self.augment not in AUGMENTATIONS:
            raise ValueError(
                f"DecodeConfig.augment: expected one of {AUGMENTATIONS}, got {self.augment!r}"
            )
        for name in ("num_z", "beam_width", "sgbs_z", "max_rollouts_per_chunk"):
            value = getattr(self, name)
            if value is None and name == "max_rollouts_per_chunk":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DecodeConfig.{name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.expansion, int) or self.expansion < 2:
            raise ValueError(
                f"DecodeConfig.expansion: expected an int >= 2 (the greedy child plus at least "
                f"one more), got {self.expansion!r}"
            )
        if self.num_starts is not None and (
            not isinstance(self.num_starts, int) or self.num_starts < 1
        ):
            raise ValueError(
                f"DecodeConfig.num_starts: expected None or an int >= 1, got {self.num_starts!r}"
            )
        if self.sgbs_z < self.beam_width:
            raise ValueError(
                f"DecodeConfig.sgbs_z: expected >= beam_width ({self.beam_width}), "
                f"got {self.sgbs_z}"
            )
        if not isinstance(self.compile, bool):
            raise ValueError(f"DecodeConfig.compile: expected true or false, got {self.compile!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"DecodeConfig.seed: expected an int, got {self.seed!r}")

    @property
    def label(self) -> str:
        """A short human-readable name of the budget, e.g. ``sampling z=800 x8``."""
        aug = f" x{self.augment}"
        if self.method == "sgbs":
            return f"sgbs b={self.beam_width} e={self.expansion} z={self.sgbs_z}{aug}"
        if self.method == "multistart":
            starts = "all" if self.num_starts is None else str(self.num_starts)
            return f"multistart starts={starts}{aug}"
        return f"{self.method} z={self.num_z}{aug}"

    def rollouts_per_chunk(self, device: torch.device | str) -> int:
        """``max_rollouts_per_chunk``, or the default for ``device`` (or its type, ``"cuda"``)
        when it is None."""
        if self.max_rollouts_per_chunk is not None:
            return self.max_rollouts_per_chunk
        kind = device if isinstance(device, str) else device.type
        return ROLLOUTS_PER_CHUNK.get(kind.split(":")[0], ROLLOUTS_PER_CHUNK["cpu"])

    def rollouts_per_row(self, num_customers: int, z_dim: int) -> int:
        """K, the best-of-K rollouts of each row (instance x copy): ``num_z``, one greedy
        rollout of a model without z, or the multistart's starts (every customer by default)."""
        if self.method == "multistart":
            starts = num_customers if self.num_starts is None else self.num_starts
            return min(starts, num_customers)
        if self.method == "greedy" and z_dim == 0:
            return 1
        return self.num_z

    def chunk_shape(
        self, num_customers: int, num_nodes: int, z_dim: int, device: torch.device | str
    ) -> tuple[int, int]:
        """``(rows, rollouts of each row)`` decoded at once (what a chunk holds in memory):
        SGBS's width per row (``sgbs_chunk``), else the best-of-K blocks (``best_of_k_chunk``)."""
        chunk = self.rollouts_per_chunk(device)
        if self.method == "sgbs":
            shape = sgbs_chunk(self.sgbs_z, self.beam_width, self.expansion, num_customers,
                               num_nodes, z_dim, chunk)  # fmt: skip
            return shape[0], shape[1]
        return best_of_k_chunk(self.rollouts_per_row(num_customers, z_dim), chunk)

    @classmethod
    def for_evaluation(
        cls,
        decoding: str,
        rollouts: int,
        augment: int,
        seed: int,
        z_dim: int,
        compiled: bool = False,
    ) -> DecodeConfig:
        """A run's final-evaluation budget (``EvaluationSource``): z-sampling or greedy
        z-rollouts (a model without z: its POMO starts), or SGBS with the reference's beam and
        expansion from ``min(rollouts, 128)`` greedy z-rollouts (POMO starts without z)."""
        method = "multistart" if z_dim == 0 and decoding != "sgbs" else decoding
        return cls(
            method=method,  # type: ignore[arg-type]
            num_z=rollouts,
            augment=augment,  # type: ignore[arg-type]
            seed=seed,
            sgbs_z=max(cls.beam_width, min(rollouts, cls.sgbs_z)),
            compile=compiled,
        )


def best_of_k_chunk(num_rollouts: int, max_rollouts_per_chunk: int) -> tuple[int, int]:
    """``(rows per chunk, rollouts per block)`` of a best-of-K decoding: rows go in groups of
    ``chunk // K``; a K larger than the chunk is split into blocks of one row."""
    block = min(num_rollouts, max_rollouts_per_chunk)
    return max(1, max_rollouts_per_chunk // block), block


def sgbs_chunk(
    initial_rollouts: int,
    beam_width: int,
    expansion: int,
    num_customers: int,
    num_nodes: int,
    z_dim: int,
    max_rollouts_per_chunk: int,
) -> tuple[int, int, int, int]:
    """``(rows per chunk, width, initial rollouts, expansion)`` of SGBS: a row holds ``width``
    rollouts at once (its initial greedy rollouts, or beam x expansion simulations); a model
    without z starts from at most one rollout per customer."""
    if z_dim == 0:
        initial_rollouts = min(initial_rollouts, num_customers)
    expansion = min(expansion, num_nodes)
    width = max(initial_rollouts, beam_width * expansion)
    return max(1, max_rollouts_per_chunk // width), width, initial_rollouts, expansion
