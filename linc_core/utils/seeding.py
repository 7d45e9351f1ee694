"""Explicit, derivable seeds: every randomness source in linc takes one."""

from __future__ import annotations

import hashlib

import torch


def derive_seed(base_seed: int, *keys: object) -> int:
    """A 63-bit seed that is a pure function of ``base_seed`` and ``keys``.

    Distinct key tuples give independent seeds (a cryptographic hash of their text), so data
    splits, shards and workers can never share a stream by accident.

    Example:
        ``derive_seed(1234, "cvrptw", 100, "train", 7)``
    """
    text = "\x1f".join([str(int(base_seed)), *(f"{type(k).__name__}:{k}" for k in keys)])
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def torch_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen
