"""Process-level CPU settings for torch workloads (entry points call these; imports never do)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource
import sys

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit hosts; mallopt rejects larger values.
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 1 << 30


def tune_cpu_allocator() -> bool:
    """Stop glibc from returning every freed tensor buffer to the OS.

    The rollout loop allocates and frees many same-sized ``[B, K, N]`` tensors per step. By
    default glibc serves blocks above a dynamic threshold with fresh ``mmap`` pages and trims
    the heap eagerly, so every step pays page faults on first touch (about a third of a CVRPTW
    step at n=100, B=64, K=128). Raising the mmap and trim thresholds keeps those pages in the
    heap for reuse. Process-wide; a no-op (returns False) off glibc.
    """
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok_mmap = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        ok_trim = libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        return False
    if not (ok_mmap and ok_trim):
        logger.debug("mallopt refused the allocator thresholds")
        return False
    return True


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GB (10^9 bytes; ``ru_maxrss`` is KiB on
    Linux). A process that ran several trials (``cluster.reuse_actors``) reports its peak over
    all of them."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
