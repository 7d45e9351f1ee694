"""Compiled against eager, side by side in one process: decoding, training, the GEMM share.

    python -m bench --only compile

Every pair runs in this process with one thread, interleaved (each repeat runs both sides,
alternating which goes first), so load from other jobs falls on both alike; a ratio is the
median of the sides' rates. Rows:

- ``decode``: ``decode(method="sampling", num_z=128, augment=8)`` of Solomon C101 and R101
  (16 rows x 128 rollouts: one chunk, one shape) with ``DecodeConfig.compile`` on and off,
  rollouts/s (target: compiled 1.5x eager);
- ``train``: ``train_step`` of full_linc at 50% of training (best-only credit), CVRPTW n=50 and
  n=100, B=16, K=128, ``TrainConfig.compile`` on and off, samples/s; at n=50 also against
  rl4co's PolyNet on the same instances (``bench.bench_train``'s peer, target 3x), and per
  decision (samples x decoding steps / s: the two policies' rollouts differ in length);
- ``gemm``: the model arithmetic's share of this core's fp32 GEMM rate. The rate: the best
  ``torch.mm`` multiply-adds/s over the decision's own GEMM shapes and a square one, measured
  in the same run. The share: one decision of all B x K = 2048 rollouts (n=50, at the depot,
  where every rollout has a choice) does ``decision_multiply_adds`` x 2048 multiply-adds; that
  over its time and the rate. Its bound: the same count over the time of the decision's matrix
  kernels alone, what the share would be if every other kernel took no time (target 60%).

Bounds, measured in the same run with ``torch.profiler``: the matrix kernels' time (GEMMs,
attention forward and backward, with their own bias copies: ``MATRIX_KERNELS``' total time)
is what compiling leaves as it is on CPU (inductor calls them as extern kernels), so a step can
get at most (eager seconds) / (its matrix kernels' seconds) faster by compiling, and train at
most B x K / (a compiled step's matrix kernels' seconds) samples/s. The decode and rl4co rows
name those bounds: a target above its bound is above what this machine allows for this model's
arithmetic. The rl4co row also names the rest of a compiled step (its seconds less its matrix
kernels') and what the 3x target leaves it: the part that fusion and the glue would have to
shrink.

Each compiled side's first calls compile (once per shape and process; the replay's packed
width and the packed decisions' width once more when they first change): the row names give
those seconds, cold (inductor's on-disk cache is a fresh folder for the run; a later process
reuses a kept cache and compiles in a fraction of that).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from bench.bench_decode import _solomon
from bench.bench_train import (
    _ours_step_seconds,
    _plan,
    counting_decisions,
    decision_multiply_adds,
    interleaved,
    rl4co_step_seconds,
)
from bench.rl4co_peer import RL4CO_PEER
from linc_core.config import ModelConfig
from linc_core.decoding import DecodeConfig, decode
from linc_core.model import LincPolicy
from linc_core.model.decisions import PolicyChooser
from linc_core.model.sampling import keyed_sampler, rollout_keys, row_seeds, sample_z
from linc_core.problems import make_env
from linc_core.train.data import generate

BATCH, ROLLOUTS = 16, 128
DECODE_TARGET, RL4CO_TARGET, SHARE_TARGET = 1.5, 3.0, 0.60
# The matrix arithmetic of a decision or a training step; none calls another, so their total
# times (addmm's copy of its bias included) add up without counting anything twice.
MATRIX_KERNELS = (
    "aten::addmm",
    "aten::mm",
    "aten::bmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
)


def _first_call(run: Callable[[int], float]) -> float:
    """Seconds of the first call (the compiling one), its result discarded."""
    began = time.perf_counter()
    run(0)
    return time.perf_counter() - began


def gemm_rate(shapes: tuple[tuple[int, int, int], ...], repeats: int = 5) -> float:
    """The best fp32 ``torch.mm`` multiply-adds per second over ``shapes`` (m, k, n)."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        out = torch.empty(m, n)
        calls = max(1, int(2e8 // (m * k * n)))
        for _ in range(repeats):
            began = time.perf_counter()
            for _ in range(calls):
                torch.mm(a, b, out=out)
            best = max(best, m * k * n * calls / (time.perf_counter() - began))
    return best


def _decode_rows(repeats: int) -> list[dict]:
    torch.manual_seed(0)
    policy = LincPolicy(ModelConfig()).eval()
    instances = _solomon(("C101", "R101"))
    config = DecodeConfig(method="sampling", num_z=128, augment=8, seed=0)

    def runner(compiled: bool) -> Callable[[int], float]:
        chosen = dataclasses.replace(config, compile=compiled)
        return lambda _: decode(policy, instances, chosen).seconds

    runners = {"eager": runner(False), "compiled": runner(True)}
    first = {name: _first_call(run) for name, run in runners.items()}
    median = interleaved(runners, repeats)
    rollouts = instances.batch_size * config.augment * config.num_z
    rate = {name: rollouts / seconds for name, seconds in median.items()}
    compile_seconds = first["compiled"] - median["compiled"]
    bound = median["eager"] / matrix_seconds(runners["compiled"], 1)
    return [
        {
            "name": (
                f"decode sampling z=128 x8, C101+R101 (n=100), rollouts/s, compiled vs eager "
                f"(compiling {compile_seconds:.0f} s once; bound with only the matrix kernels: "
                f"{bound:.2f}x)"
            ),
            "ours": rate["compiled"],
            "peer": rate["eager"],
            "peer_name": "the same decode eager (DecodeConfig.compile=False), interleaved",
            "ratio": rate["compiled"] / rate["eager"],
            "target": DECODE_TARGET,
            "bound": bound,
        }
    ]


def _train_rows(n: int, repeats: int, peer: bool) -> list[dict]:
    steps: dict[str, dict[str, int]] = {"compiled": {}, "rl4co": {}}
    runners = {
        "eager": _ours_step_seconds("full_linc", BATCH, ROLLOUTS, n, 0),
        "compiled": _ours_step_seconds(
            "full_linc", BATCH, ROLLOUTS, n, 0, decoding_steps=steps["compiled"], compile=True
        ),
    }
    if peer:
        sizes = _plan("full_linc", BATCH, ROLLOUTS, n).model
        runners["rl4co"] = rl4co_step_seconds(
            BATCH, ROLLOUTS, n, 0, sizes, decoding_steps=steps["rl4co"]
        )
    first = {name: _first_call(run) for name, run in runners.items()}
    # a second step: the replay's packed width changes, its one recompile (dynamic=None)
    warm = {name: _first_call(run) for name, run in runners.items()}
    timed, decision_rates = counting_decisions(runners, steps, BATCH * ROLLOUTS)
    median = interleaved(timed, repeats)
    rate = {name: BATCH * ROLLOUTS / seconds for name, seconds in median.items()}
    compile_seconds = first["compiled"] + warm["compiled"] - 2 * median["compiled"]
    size = f"CVRPTW n={n}, B={BATCH}, K={ROLLOUTS}"
    rows = [
        {
            "name": (
                f"train samples/s full_linc compiled vs eager ({size}; compiling "
                f"{compile_seconds:.0f} s once)"
            ),
            "ours": rate["compiled"],
            "peer": rate["eager"],
            "peer_name": "the same train_step eager (TrainConfig.compile=False), interleaved",
            "ratio": rate["compiled"] / rate["eager"],
            "target": None,
        }
    ]
    if peer:
        eager_ratio = rate["eager"] / rate["rl4co"]
        matrix = matrix_seconds(runners["compiled"], 2)
        bound = BATCH * ROLLOUTS / matrix / rate["rl4co"]
        # What the target leaves every other kernel of a step (transitions, statistics,
        # softmax, sampling, glue, elementwise backward, optimiser) next to the matrix kernels.
        rest = median["compiled"] - matrix
        rest_allowed = BATCH * ROLLOUTS / (RL4CO_TARGET * rate["rl4co"]) - matrix
        rows.append(
            {
                "name": (
                    f"train samples/s full_linc compiled vs rl4co PolyNet ({size}; bound with "
                    f"only the matrix kernels: {bound:.2f}x; {RL4CO_TARGET:g}x leaves the rest "
                    f"of a step {max(rest_allowed, 0.0) * 1e3:.0f} ms, now {rest * 1e3:.0f} ms)"
                ),
                "ours": rate["compiled"],
                "peer": rate["rl4co"],
                "peer_name": f"{RL4CO_PEER} (eager full_linc: {eager_ratio:.2f}x)",
                "ratio": rate["compiled"] / rate["rl4co"],
                "target": RL4CO_TARGET,
                "bound": bound,
                "rest_seconds": rest,
                "rest_allowed_seconds": rest_allowed,
            }
        )
        # two untrained policies' rollouts differ in length, and rl4co's shorten as it trains:
        # seconds per decision are what neither changes
        per_decision = {name: statistics.median(r) for name, r in decision_rates.items()}
        rows.append(
            {
                "name": "  per decision: full_linc compiled vs rl4co PolyNet",
                "ours": per_decision["compiled"],
                "peer": per_decision["rl4co"],
                "peer_name": (
                    f"{RL4CO_PEER}, samples x decoding steps / s ({steps['compiled']['last']} "
                    f"vs {steps['rl4co']['last']} steps)"
                ),
                "ratio": per_decision["compiled"] / per_decision["rl4co"],
                "target": None,
            }
        )
    return rows


def _decision_seconds(chooser: PolicyChooser, state, calls: int = 10) -> float:
    chooser(state, 0)
    began = time.perf_counter()
    for step in range(calls):
        chooser(state, step)
    return (time.perf_counter() - began) / calls


def matrix_seconds(run: Callable[[int], object], calls: int, repeats: int = 3) -> float:
    """Seconds per call of ``run(i)`` (i = 1..calls) spent in ``MATRIX_KERNELS`` (their total
    time, ``torch.profiler``), the least of ``repeats`` profiles (as the timings take the best
    or the median: a profile that another job slowed would lower the bound)."""
    # kineto prints two lines per profile ("USDT: ... profiler_start"); its level 100 is quiet
    os.environ.setdefault("KINETO_LOG_LEVEL", "100")
    least = float("inf")
    for _ in range(repeats):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            for i in range(1, calls + 1):
                run(i)
        events = profiler.key_averages()
        kernels = sum(e.cpu_time_total for e in events if e.key in MATRIX_KERNELS)
        least = min(least, kernels / 1e6 / calls)
    return least


def _gemm_rows(repeats: int) -> list[dict]:
    n = 50
    plan = _plan("full_linc", BATCH, ROLLOUTS, n)
    model = plan.model
    d, hidden = model.embedding_dim, model.scorer_hidden_dim
    rows_ = BATCH * ROLLOUTS
    summary = 1 + len(model.summary_stats)
    shapes = (
        (rows_, d, d),
        (rows_, d + model.z_dim, model.poly_hidden_dim),
        (rows_, d + summary, 3 * hidden),
    )
    rate = gemm_rate((*shapes, (1024, 1024, 1024)))
    torch.manual_seed(0)
    policy = LincPolicy(model).eval()
    instance = generate("cvrptw", BATCH, n, 0)
    env = make_env(instance, ROLLOUTS)
    # at the depot, every customer open: every rollout has a choice, so eager computes every
    # row too (its packing would leave forced rollouts out of the count's arithmetic)
    state = env.reset()
    assert bool((state.mask.sum(-1) > 1).all())
    z = sample_z(row_seeds(1, BATCH), ROLLOUTS, model.z_dim)
    macs = decision_multiply_adds(model, n + 1) * rows_
    with torch.no_grad():
        encoded = policy.encode(instance)
        pick = keyed_sampler(rollout_keys(row_seeds(2, BATCH), 0, ROLLOUTS))
        choosers = {
            compiled: PolicyChooser(
                policy, env, encoded, z, pick, skip_forced=False, compiled=compiled
            )
            for compiled in (False, True)
        }
        # both sides interleaved (timings and profiles), the least of each side
        timings = {
            compiled: lambda _, chooser=chooser: _decision_seconds(chooser, state)
            for compiled, chooser in choosers.items()
        }
        profiles = {
            compiled: lambda _, chooser=chooser: matrix_seconds(
                functools.partial(chooser, state), 5, repeats=1
            )
            for compiled, chooser in choosers.items()
        }
        seconds = interleaved(timings, repeats, min)
        matrix = interleaved(profiles, 3, min)
        found = {compiled: (seconds[compiled], matrix[compiled]) for compiled in choosers}
    rows = []
    for compiled, label in ((True, "compiled"), (False, "eager")):
        seconds, matrix = found[compiled]
        share, bound = macs / seconds / rate, macs / matrix / rate
        rows.append(
            {
                "name": (
                    f"model arithmetic / GEMM rate, {label} decision (CVRPTW n={n}, {rows_} "
                    f"rollouts, {macs / 1e6:.0f}M MAC in {seconds * 1e3:.1f} ms; GEMM "
                    f"{rate / 1e9:.1f} GMAC/s; bound with only the matrix kernels "
                    f"({matrix * 1e3:.1f} ms): {bound:.0%})"
                ),
                "ours": 100 * share,
                "ratio": share / SHARE_TARGET,
                "target": 100 * SHARE_TARGET,
            }
        )
    return rows


def bench_compile(quick: bool, peer: bool = True) -> list[dict]:
    """Every row of the module docstring, with the load average at the start and the end."""
    repeats = 2 if quick else 3
    load = os.getloadavg()[0]
    kept = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    cold = tempfile.mkdtemp(prefix="linc-bench-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cold  # compile times from a cold cache
    try:
        rows = _gemm_rows(repeats) + _decode_rows(repeats) + _train_rows(50, repeats, peer)
        if not quick:
            rows += _train_rows(100, repeats, peer=False)
    finally:
        if kept is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = kept
        shutil.rmtree(cold, ignore_errors=True)
    note = f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on 2 cores (other jobs)"
    rows[0]["name"] = f"{rows[0]['name']} [{note}]"
    return rows


__all__ = ["bench_compile", "gemm_rate", "matrix_seconds"]
