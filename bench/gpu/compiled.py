"""The compiled decoding step against eager, on the device under test (CPU mode too).

- ``compile``: ``decode(DecodeConfig(compile=True))`` against the same decode eager: the same
  best costs (float32, to 1e-3 relative) is a pass; the speed-up and the first call's compile
  time are the detail. On CPU (the check's CPU mode, and ``--quick``) a small model decodes
  two Solomon instances; on CUDA the reference-size model decodes 8 at z=800 x8.
- ``cuda graphs``: the decoding loop where launches dominate (one instance, z=16, no
  augmentation): eager against the compiled step, which runs as CUDA graphs on CUDA
  (``linc_core.utils.compiling``: ``mode="reduce-overhead"``). A pass needs the same best cost
  and no graph skipped by inductor (``cudagraph_skips``: a CPU tensor or a dynamic shape in the
  step would send it back to plain kernels); not run without CUDA.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from bench.gpu.rows import (
    FAIL,
    INFO,
    PASS,
    CheckContext,
    Row,
    not_run,
    relative_difference,
    seeded_policy,
    solomon,
    timed,
    variant_setup,
)
from linc_core.decoding import DecodeConfig, decode

SECTION = "compile"
SAME_COST = 1e-3  # float32 decodes: the same solutions, costs equal to rounding


def _compared(ctx: CheckContext, policy, instances, config: DecodeConfig) -> dict:
    """Eager and compiled decodes of the same budget: seconds, results, compile seconds."""
    eager_seconds, eager = timed(ctx.device, lambda: decode(policy, instances, config))
    compiled_config = dataclasses.replace(config, compile=True)
    began = time.perf_counter()
    decode(policy, instances, compiled_config)  # compiles (each shape once)
    first = time.perf_counter() - began
    seconds, compiled = timed(ctx.device, lambda: decode(policy, instances, compiled_config))
    return {
        "eager_seconds": eager_seconds,
        "seconds": seconds,
        "compile_seconds": max(0.0, first - seconds),
        "difference": relative_difference(compiled.cost, eager.cost),
    }


def _compile_row(ctx: CheckContext) -> Row:
    small = not ctx.has_cuda
    name = "torch.compile decode step vs eager"
    try:
        model, _ = variant_setup("full_linc", small=small)
        policy = seeded_policy(model).to(ctx.device)
        eight = ("C101", "C201", "R101", "R201", "RC101", "RC201", "R102", "C102")
        instances = solomon(("C101", "R101") if small else eight)
        num_z, augment = (32, 8) if small else (800, 8)
        config = DecodeConfig(method="sampling", num_z=num_z, augment=augment)
        found = _compared(ctx, policy, instances, config)
    except Exception as err:  # noqa: BLE001 - a compiler failure is a finding, not a crash
        return Row(SECTION, name, status=FAIL, detail=repr(err)[:300])
    size = "small model" if small else "reference model"
    return Row(
        SECTION,
        f"{name} ({instances.batch_size} Solomon-100, z={num_z} x{augment}, {size})",
        found["eager_seconds"] / found["seconds"],
        "x eager",
        PASS if found["difference"] <= SAME_COST else FAIL,
        f"eager {found['eager_seconds']:.2f} s, compiled {found['seconds']:.2f} s (compiling "
        f"{found['compile_seconds']:.0f} s once); best-cost rel difference "
        f"{found['difference']:.1e} (<= {SAME_COST:g})",
        found,
    )


def _cuda_graphs_row(ctx: CheckContext) -> Row:
    name = "CUDA graphs decode loop vs eager (1 instance, z=16, launch-bound)"
    if not ctx.has_cuda:
        return not_run(SECTION, name, "CUDA graphs need CUDA")
    try:
        model, _ = variant_setup("full_linc", small=False)
        policy = seeded_policy(model).to(ctx.device)
        instance = solomon(("C101",))
        config = DecodeConfig(method="sampling", num_z=16, augment=1)
        skips_before = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
        found = _compared(ctx, policy, instance, config)
        skips = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] - skips_before
    except Exception as err:  # noqa: BLE001 - a compiler failure is a finding, not a crash
        return Row(SECTION, name, status=FAIL, detail=repr(err)[:300])
    same = found["difference"] <= SAME_COST
    return Row(
        SECTION,
        name,
        found["eager_seconds"] / found["seconds"],
        "x eager",
        PASS if same and skips == 0 else FAIL if not same else INFO,
        f"eager {found['eager_seconds']:.3f} s, CUDA graphs {found['seconds']:.3f} s (compiling "
        f"{found['compile_seconds']:.0f} s once); graphs skipped by inductor: {skips}; "
        f"best-cost rel difference {found['difference']:.1e}",
        {**found, "cudagraph_skips": skips},
    )


def run(ctx: CheckContext) -> list[Row]:
    return [_compile_row(ctx), _cuda_graphs_row(ctx)]


__all__ = ["run"]
