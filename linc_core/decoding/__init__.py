"""Decoding: greedy, sampling, z-sampling with x8 augmentation, POMO multi-start, SGBS.

from linc_core.decoding import DecodeConfig, decode
result = decode(policy, instances, DecodeConfig(method="sampling", num_z=800, augment=8))
result.cost      # [B] float64 best exact distance over z x augmentation
result.routes    # B verifier-ready solutions
"""

from linc_core.decoding.api import DecodeResult, actions_to_solution, decode, exact_length
from linc_core.decoding.config import DECODE_METHODS, DecodeConfig
from linc_core.decoding.deadline import DeadlineExceeded

__all__ = [
    "DECODE_METHODS",
    "DecodeConfig",
    "DecodeResult",
    "DeadlineExceeded",
    "actions_to_solution",
    "decode",
    "exact_length",
]
