"""``DecodeConfig``: the typed, validated knobs of every decoding method."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

DecodeMethod = Literal["greedy", "sampling", "sgbs", "multistart"]
DECODE_METHODS: tuple[str, ...] = ("greedy", "sampling", "sgbs", "multistart")
AUGMENTATIONS: tuple[int, ...] = (1, 8)
# Rollouts decoded at once by default, per device type: a GPU works on all rows of a step at
# once, so larger chunks mean fewer, fuller steps (measured: DecodeConfig's notes).
ROLLOUTS_PER_CHUNK = {"cpu": 16384, "cuda": 65536}


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
            default): ``ROLLOUTS_PER_CHUNK`` for the model's device, 16384 on CPU and 65536 on
            CUDA (the 56 Solomon-100 at z=800 x8 on an H200: 11.8 s at 16384, 4.0 s and 0.8
            GiB at 65536, 3.7 s and 3.4 GiB all at once). Results do not depend on it.
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

    def rollouts_per_chunk(self, device: torch.device) -> int:
        """``max_rollouts_per_chunk``, or the default for ``device`` when it is None."""
        if self.max_rollouts_per_chunk is not None:
            return self.max_rollouts_per_chunk
        return ROLLOUTS_PER_CHUNK.get(device.type, ROLLOUTS_PER_CHUNK["cpu"])
