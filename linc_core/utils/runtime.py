"""Process-level CPU settings for torch workloads (entry points call these; imports never do)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import importlib
import logging
import os
import resource
import sys
import threading

logger = logging.getLogger(__name__)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc caps the mmap threshold at 32 MiB on 64-bit hosts; mallopt rejects larger values.
_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
_TRIM_THRESHOLD_BYTES = 1 << 30


def _glibc() -> ctypes.CDLL | None:
    """The C library on Linux (where the allocator is glibc's), else None."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def tune_cpu_allocator() -> bool:
    """Stop glibc from returning every freed tensor buffer to the OS.

    The rollout loop allocates and frees many same-sized ``[B, K, N]`` tensors per step. By
    default glibc serves blocks above a dynamic threshold with fresh ``mmap`` pages and trims
    the heap eagerly, so every step pays page faults on first touch (about a third of a CVRPTW
    step at n=100, B=64, K=128; a compiled decision of 2048 rollouts at n=50 faulted 673 pages
    and took 14.5 ms against 13.0 ms). Raising the mmap and trim thresholds keeps those pages in
    the heap for reuse, at the price of holding up to 1 GiB of freed heap
    (``release_free_heap`` gives it back). The command lines, Tune trials and benchmarks call
    it at start; a script or notebook calls it once before ``fit`` or ``decode``.
    Process-wide; a no-op (returns False) off glibc.
    """
    libc = _glibc()
    if libc is None:
        return False
    try:
        ok_mmap = libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
        ok_trim = libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        return False
    if not (ok_mmap and ok_trim):
        logger.debug("mallopt refused the allocator thresholds")
        return False
    return True


def release_free_heap() -> bool:
    """Collect garbage, then give the heap's free pages back to the OS (glibc
    ``malloc_trim``); False off glibc (the collection still runs).

    ``tune_cpu_allocator`` keeps up to 1 GiB of freed heap (and what fragmentation pins) for the
    next step. A process that runs several trials one after another (``cluster.reuse_actors``)
    would otherwise carry the largest trial's heap into the next: after four trials of about
    2 GB each, a test process held 1.8 to 2.4 GB between them, and 0.23 GB once trimmed. Call it
    where a process finishes a large piece of work; it costs milliseconds.
    """
    gc.collect()  # tensors held only by reference cycles are freed before the trim
    return trim_free_heap()


def trim_free_heap() -> bool:
    """Give the heap's free pages back to the OS (glibc ``malloc_trim``), without a garbage
    collection; False off glibc.

    A CPU decoding calls it between its chunks
    (``linc_core.decoding.best_of_k.trim_between_chunks``, where its measurement is); it costs
    about a millisecond, and the next chunk takes its pages afresh, once.
    """
    return _malloc_trim()


def trim_heap_above(ceiling_bytes: int) -> bool:
    """Give the heap's free pages back to the OS (``malloc_trim``, no garbage collection) when
    this process holds more than ``ceiling_bytes`` resident; True when it trimmed.

    A training run's heap keeps growing while its live tensors stay the same: the rollouts'
    packed widths change from decision to decision, and the holes they leave pin pages (full_linc,
    CVRPTW n=50, B=16, K=64, one thread: peak resident 0.70 GB at step 20, 1.16 GB at step 160,
    with or without ``tune_cpu_allocator``; trimmed after every step, 0.65-0.67 GB). Called
    after each step (``linc_core.train.memory_ceiling.HeapCeiling``), it costs a read of
    ``/proc/self/statm`` until the process passes the ceiling.
    """
    if resident_bytes() <= ceiling_bytes:
        return False
    return trim_free_heap()


def _malloc_trim() -> bool:
    libc = _glibc()
    if libc is None:
        return False
    try:
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def resident_bytes() -> int:
    """This process's resident memory now, in bytes (``/proc/self/statm``; its peak so far
    where there is no ``/proc``, as on macOS)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            resident_pages = int(statm.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes there, KiB on Linux


def peak_rss_gb() -> float:
    """This process's peak resident set size so far, in GB (10^9 bytes).

    Linux's ``VmHWM`` (the high-water mark of this program image's resident pages); elsewhere
    ``ru_maxrss``, which on Linux also carries the RSS of the parent at the ``fork`` before
    this program's ``exec`` (a child of a large process would report its parent's size). The
    mark covers the process's whole life unless :func:`reset_peak_rss` lowered it (a process
    that runs several trials, ``cluster.reuse_actors``, resets it as each trial starts).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9  # kB
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def reset_peak_rss() -> bool:
    """Lower this process's ``VmHWM`` to its current RSS (Linux ``clear_refs``, value 5), so
    that :func:`peak_rss_gb` reports the peak of the work that follows; False where the
    kernel does not offer it (the mark then covers the process's whole life)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


def import_in_background(*modules: str) -> threading.Thread:
    """Import ``modules`` on a daemon thread, so that a fresh process's first use of them does
    not wait for the import.

    A trial's process is new; torch's optimizers import ``torch._dynamo`` on their first
    ``step`` (1.5 to 3 s of imports here), which would otherwise land inside the first epoch.
    Started before data loading, the import overlaps with work that releases the GIL. A
    failing import is left to the first real use to report.
    """

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the caller's own import reports it
                logger.debug("background import of %s failed", name, exc_info=True)

    thread = threading.Thread(target=run, name="linc-import", daemon=True)
    thread.start()
    return thread
