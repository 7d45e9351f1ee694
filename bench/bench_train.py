"""Training throughput: samples/s (instance x rollout, forward + backward + optimiser step).

CVRPTW n=50, B=16, K=128 on CPU, measured side by side in one process with interleaved repeats
(median): our ``full_linc`` and ``baseline`` presets (``train_step``), and rl4co's PolyNet on
rl4co's own CVRPTW env at the same size, width and encoder/decoder sizes.

One rl4co step is exactly what its Lightning training step runs, minus the Trainer:
``PolyNet.shared_step(batch, 0, "train")`` (env reset, policy forward with ``num_starts=k`` and
``multisample=True``, Poppy loss with the shared baseline and best-rollout mask), then
``loss.backward()`` and an Adam step from ``PolyNet.configure_optimizers()``. Both train on the
same instances, linc's generator's batch converted for rl4co's env (``bench.rl4co_peer``'s
``to_rl4co``; its test: every route set rl4co builds on one is feasible for linc), so a sample
is the same work and rollout lengths differ only by the policies. (On rl4co's own generator's
instances its untrained PolyNet took 75-84 decisions a rollout against full_linc's 67-69 on
linc's, which raised the samples/s ratio by up to a quarter.) Both run fp32 without gradient
clipping (rl4co's ``RL4COTrainer`` would clip at 1.0 and ask for 16-bit mixed precision).
rl4co is installed for benchmarking only and is imported here, never by ``linc_core``.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from bench.rl4co_peer import RL4CO_PEER, polynet, to_rl4co
from linc_core.config import ModelConfig
from linc_core.model import LincPolicy
from linc_core.model.decoder import CONTEXT_SCALARS
from linc_core.runs.plan import DataSource, RunPlan, resolve_run
from linc_core.train import train_step
from linc_core.train.data import generate
from linc_core.train.precision import resolve_precision


def _plan(preset: str, batch: int, rollouts: int, n: int) -> RunPlan:
    """The run a preset trains at this size: its effective model and training configs."""
    train = {"num_rollouts": rollouts, "batch_size": batch}
    return resolve_run(preset, DataSource("generated", "cvrptw", n), train=train)


def decision_multiply_adds(model: ModelConfig, num_nodes: int) -> int:
    """Multiply-adds of one rollout's decision: the decoder context and the candidate scores.

    Only the matrix products are counted (step query, glimpse scores and values, head
    combination, z residual, base scores, and the scorer's own), the work that dominates a
    decoding step on CPU; elementwise work (the LINC local scores, the feasible-set statistics,
    activations) is not. Two models' counts bound their decode steps' cost ratio: it is the
    ratio their steps reach when both run at the machine's GEMM speed.

    Args:
        num_nodes: N, the depot included.
    """
    d, n = model.embedding_dim, num_nodes
    macs = CONTEXT_SCALARS[model.problem] * d + 2 * n * d + d * d + n * d
    if model.z_dim > 0:
        macs += (d + model.z_dim) * model.poly_hidden_dim + model.poly_hidden_dim * d
    p, hidden = len(model.candidate_features), model.scorer_hidden_dim
    if model.scorer == "linc":
        macs += (p + int(model.phi_bias)) * d  # the comparator v (and the offset)
        if model.summary != "none":
            summary = 1 + len(model.summary_stats)
            macs += (d + summary) * 3 * hidden + hidden * d + hidden * (p + 2)
    elif model.scorer == "mlp":
        macs += d * hidden + n * (p + 1) * hidden
    return macs


def _ours_step_seconds(
    preset: str,
    batch: int,
    rollouts: int,
    n: int,
    seed: int,
    *,
    train_preset: str | None = None,
    progress: float = 0.5,
    decoding_steps: dict[str, int] | None = None,
    compile: bool = False,
    precision: str = "fp32",
) -> Callable[[int], float]:
    """A function running one seeded ``train_step`` of ``preset`` and returning its seconds.

    ``train_preset`` takes the training settings (credit, rollout mask) from another preset;
    ``progress`` is the point of training the step is taken at; ``compile`` sets
    ``TrainConfig.compile`` and ``precision`` the step's autocast (``TrainConfig.precision``, on
    CPU). ``decoding_steps["last"]`` is set to the decoding steps of the last step run (the
    rollouts' length, which differs between models: each step costs a decision of every
    rollout still to decide).
    """
    plan = _plan(preset, batch, rollouts, n)
    model, config = plan.model, plan.train
    if train_preset is not None:
        config = _plan(train_preset, batch, rollouts, n).train
    config = dataclasses.replace(config, compile=compile)
    torch.manual_seed(seed)
    policy = LincPolicy(model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4)
    instance = generate("cvrptw", batch, n, seed)
    mixed = resolve_precision(precision, "cpu")

    def run(step: int) -> float:
        start = time.perf_counter()
        metrics = train_step(policy, optimizer, instance, config, progress, step, precision=mixed)
        seconds = time.perf_counter() - start
        if decoding_steps is not None:
            decoding_steps["last"] = metrics.steps
        return seconds

    return run


def interleaved(
    runners: dict[Any, Callable[[int], float]],
    repeats: int,
    statistic: Callable[[list[float]], float] = statistics.median,
) -> dict[Any, float]:
    """``statistic`` (median) of each runner's seconds over ``repeats`` rounds, the order
    rotating per round (so a slow spell of the machine falls on every side)."""
    names = list(runners)
    seconds: dict[Any, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            seconds[name].append(runners[name](r + 1))
    return {name: statistic(values) for name, values in seconds.items()}


def counting_decisions(
    runners: dict[str, Callable[[int], float]], steps: dict[str, dict[str, int]], samples: int
) -> tuple[dict[str, Callable[[int], float]], dict[str, list[float]]]:
    """``runners`` with those named in ``steps`` recording each call's samples x decoding steps
    per second (``steps[name]["last"]``, which the runner sets), and those rates by name."""
    rates: dict[str, list[float]] = {name: [] for name in runners if name in steps}

    def counted(name: str, run: Callable[[int], float]) -> Callable[[int], float]:
        def timed(step: int) -> float:
            seconds = run(step)
            rates[name].append(samples * steps[name]["last"] / seconds)
            return seconds

        return timed

    wrapped = {name: counted(name, run) if name in rates else run for name, run in runners.items()}
    return wrapped, rates


def rl4co_step_seconds(
    batch: int,
    rollouts: int,
    n: int,
    seed: int,
    sizes: ModelConfig,
    device: str = "cpu",
    decoding_steps: dict[str, int] | None = None,
) -> Callable[[int], float]:
    """A function running one PolyNet training step (as Lightning's loop would) in seconds, on
    ``device`` (the GPU's queue drained before the clock stops).

    ``decoding_steps["last"]`` is set to the decoding steps of the last step run (rl4co's
    ``env.step`` calls: one per decision of every rollout), as ``_ours_step_seconds`` does: an
    untrained PolyNet's rollouts shorten as it trains (71 to 62-65 decisions over its first 12
    training steps at n=50, 2.75 to 2.1-2.3 s), so its samples/s rises with them while its
    seconds per decision stay put (34-39 ms).
    """
    _, model = polynet(batch, rollouts, n, seed, sizes)
    data = to_rl4co(generate("cvrptw", batch, n, seed))  # the instances ours trains on
    calls = 0
    plain_step = model.env.step

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return plain_step(*args, **kwargs)

    if decoding_steps is not None:
        model.env.step = counted_step  # one call per decision of every rollout
    model.to(device)
    data = data.to(device)
    optimizer = model.configure_optimizers()
    model.train()
    on_cuda = torch.device(device).type == "cuda"

    def run(step: int) -> float:
        nonlocal calls
        calls = 0
        torch.manual_seed(step)  # rl4co samples actions from the global stream
        batch_td = data.clone()
        start = time.perf_counter()
        with warnings.catch_warnings():  # self.log() without a Trainer only warns
            warnings.simplefilter("ignore")
            out = model.shared_step(batch_td, batch_idx=0, phase="train")
        optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        optimizer.step()
        if on_cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        if decoding_steps is not None:
            decoding_steps["last"] = calls
        return seconds

    return run


def bf16_matrix_units() -> str:
    """What runs bf16 matrix products on this CPU: ``AMX``, ``AVX512-BF16`` or ``none``
    (Linux's CPU flags; ``unknown`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return "unknown"
    if "amx_bf16" in flags:
        return "AMX"
    return "AVX512-BF16" if "avx512_bf16" in flags else "none"


def bench_train(
    batch: int = 16, rollouts: int = 128, n: int = 50, repeats: int = 3, peer: bool = True
) -> list[dict]:
    """Median samples/s of our presets and (``peer``) rl4co PolyNet, interleaved.

    Steps are taken at 50% of training, where full_linc's best-only mask applies (from 25% on
    by default) and the baseline preset trains every rollout (its dense group-mean credit). Two
    more pairs separate the model's cost from the credit's: the baseline model under
    full_linc's training settings, and both presets at 0% (before best-only: every rollout
    trains). The same two pairs are also given per decision (samples x decoding steps per
    second): two untrained models drive rollouts of different lengths, and a model whose
    rollouts return to the depot more often takes more steps per sample. Every runner takes one
    warm-up step first; each repeat then runs all of them, rotating the order, so machine load
    falls on each alike.
    """
    sizes = _plan("full_linc", batch, rollouts, n).model
    settings = {
        "full_linc": ("full_linc", {}),
        "baseline": ("baseline", {}),
        "baseline_model_linc_credit": ("baseline", {"train_preset": "full_linc"}),
        "full_linc_dense": ("full_linc", {"progress": 0.0}),
        "baseline_dense": ("baseline", {"progress": 0.0}),
        "full_linc_bf16": ("full_linc", {"precision": "bf16"}),
    }
    last_steps: dict[str, dict[str, int]] = {name: {} for name in settings}
    runners: dict[str, Callable[[int], float]] = {
        name: _ours_step_seconds(
            preset, batch, rollouts, n, 0, decoding_steps=last_steps[name], **options
        )
        for name, (preset, options) in settings.items()
    }
    if peer:
        last_steps["rl4co_polynet"] = {}
        runners["rl4co_polynet"] = rl4co_step_seconds(
            batch, rollouts, n, 0, sizes, decoding_steps=last_steps["rl4co_polynet"]
        )
    for run in runners.values():
        run(0)
    samples = batch * rollouts
    timed, decision_rates = counting_decisions(runners, last_steps, samples)
    rate = {p: samples / seconds for p, seconds in interleaved(timed, repeats).items()}
    per_decision = {p: statistics.median(r) for p, r in decision_rates.items()}
    size = f"CVRPTW n={n}, B={batch}, K={rollouts}"
    nodes = n + 1
    linc_macs = decision_multiply_adds(sizes, nodes)
    baseline_macs = decision_multiply_adds(_plan("baseline", batch, rollouts, n).model, nodes)
    arithmetic = (
        f"; multiply-adds per decision {linc_macs / 1e3:.1f}k vs {baseline_macs / 1e3:.1f}k: "
        f"{baseline_macs / linc_macs:.2f}x at equal GEMM speed"
    )

    def row(
        name: str,
        ours: str,
        peer_key: str,
        peer_name: str,
        target: float | None,
        rates: dict[str, float] = rate,
    ) -> dict:
        return {
            "name": f"{name} ({size})",
            "ours": rates[ours],
            "peer": rates[peer_key],
            "peer_name": peer_name,
            "ratio": rates[ours] / rates[peer_key],
            "target": target,
        }

    rows = []
    if peer:
        rows.append(
            row(
                "train samples/s full_linc vs rl4co PolyNet",
                "full_linc",
                "rl4co_polynet",
                RL4CO_PEER,
                3.0,
            )
        )
        # two untrained policies' rollouts differ in length (and rl4co's shorten as it trains)
        steps = f"{last_steps['full_linc']['last']} vs {last_steps['rl4co_polynet']['last']}"
        rows.append(
            row(
                "  per decision: full_linc vs rl4co PolyNet",
                "full_linc",
                "rl4co_polynet",
                f"{RL4CO_PEER}, samples x decoding steps / s ({steps} steps)",
                None,
                per_decision,
            )
        )
    rows.append(
        row(
            "train samples/s full_linc vs our baseline",
            "full_linc",
            "baseline",
            "our baseline preset, each with its own credit (cost of LINC = 1/ratio - 1)",
            0.8,
        )
    )
    rows.append(
        row(
            "train samples/s full_linc bf16 vs fp32",
            "full_linc_bf16",
            "full_linc",
            f"the same train_step in fp32; this CPU's bf16 matrix units: {bf16_matrix_units()}",
            None,
        )
    )
    pairs = [
        (
            "full_linc vs baseline model, both best-only",
            "full_linc",
            "baseline_model_linc_credit",
            "the baseline model under full_linc's training settings",
        ),
        (
            "full_linc vs baseline at 0% (every rollout trains)",
            "full_linc_dense",
            "baseline_dense",
            "both presets before the best-only mask",
        ),
    ]
    for label, ours, peer_key, peer_name in pairs:
        rows.append(row(f"  model cost: {label}", ours, peer_key, peer_name, 0.85))
    for label, ours, peer_key, peer_name in pairs:
        steps = f" ({last_steps[ours]['last']} vs {last_steps[peer_key]['last']} steps)"
        rows.append(
            row(
                f"  per decision: {label}",
                ours,
                peer_key,
                f"{peer_name}, samples x decoding steps / s{steps}{arithmetic}",
                None,
                per_decision,
            )
        )
    return rows
