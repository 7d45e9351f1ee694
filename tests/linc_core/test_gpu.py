"""CUDA behaviour of linc_core, run where a GPU is (``pytest -m gpu``); skipped without one.

On a bare GPU machine (PyTorch, numpy, pyarrow; README "GPU check"): these tests need only
``linc_core`` and vrplib. ``python -m bench.gpu`` runs the same comparisons at every variant
and adds precision, synchronisation and throughput rows.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from linc_core.decoding import DecodeConfig, decode
from linc_core.model import LincPolicy
from linc_core.train import train_step
from linc_core.train.data import generate
from linc_core.train.precision import resolve_precision
from tests.conftest import tiny_configs

if not torch.cuda.is_available():  # one skip line for the module, not one per test
    pytest.skip(
        "needs CUDA (no GPU here; run pytest -m gpu on a GPU machine)", allow_module_level=True
    )
pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def one_step(preset: str, device: torch.device, dtype: torch.dtype) -> tuple[float, torch.Tensor]:
    model, config = tiny_configs(preset, num_rollouts=8, batch_size=3)
    torch.manual_seed(0)
    policy = LincPolicy(model).to(device=device, dtype=dtype)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.0)
    instance = generate("cvrptw", 3, 15, seed=4).to(device=device, dtype=dtype)
    metrics = train_step(policy, optimizer, instance, config, 0.5, 9)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in policy.parameters()]
    return metrics.loss, torch.cat([g.flatten() for g in grads]).double().cpu()


@pytest.mark.parametrize("preset", ["full_linc", "baseline", "naive_mlp", "no_step_summary"])
def test_a_training_step_on_cuda_equals_the_cpu_step_in_float64(preset: str) -> None:
    """Keyed draws: both devices sample the same rollouts, so loss and gradient agree."""
    loss_cpu, grad_cpu = one_step(preset, torch.device("cpu"), torch.float64)
    loss_gpu, grad_gpu = one_step(preset, CUDA, torch.float64)
    assert loss_gpu == pytest.approx(loss_cpu, rel=1e-9, abs=1e-12)
    assert float(grad_cpu.abs().max()) > 0
    torch.testing.assert_close(grad_gpu, grad_cpu, rtol=0, atol=1e-9 * float(grad_cpu.abs().max()))


@pytest.mark.parametrize("method", ["greedy", "sampling", "sgbs"])
def test_decoding_on_cuda_gives_the_cpu_solutions_in_float64(method: str) -> None:
    model, _ = tiny_configs("full_linc")
    torch.manual_seed(0)
    policy = LincPolicy(model).double()
    instances = generate("cvrptw", 3, 20, seed=6).to(dtype=torch.float64)
    config = DecodeConfig(method=method, num_z=8, augment=8, seed=1, sgbs_z=4, beam_width=2,
                          expansion=2)  # fmt: skip
    cpu = decode(policy, instances, config)
    gpu = decode(policy.to(CUDA), instances, config)
    assert gpu.routes == cpu.routes
    torch.testing.assert_close(gpu.cost, cpu.cost)


def test_the_decode_loop_synchronises_a_few_times_per_chunk_not_per_step() -> None:
    from bench.gpu.sync import count_syncs

    model, _ = tiny_configs("full_linc")
    policy = LincPolicy(model).to(CUDA)
    instances = generate("cvrptw", 2, 50, seed=3)
    config = DecodeConfig(method="sampling", num_z=32, augment=1, seed=0)
    decode(policy, instances, config)
    _, syncs = count_syncs(lambda: decode(policy, instances, config))
    assert sum(syncs.values()) <= 12, syncs  # 50+ decoding steps


@pytest.mark.parametrize("name", ["bf16", "fp16"])
def test_mixed_precision_training_steps_on_cuda_are_finite(name: str) -> None:
    model, config = tiny_configs("full_linc", num_rollouts=8, batch_size=4)
    policy = LincPolicy(model).to(CUDA)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    precision = resolve_precision(name, CUDA)
    scaler = precision.grad_scaler()
    for step in range(3):
        instance = generate("cvrptw", 4, 20, seed=step).to(CUDA)
        metrics = train_step(policy, optimizer, instance, config, 0.3, step,
                             precision=precision, scaler=scaler)  # fmt: skip
        assert torch.isfinite(torch.tensor([metrics.loss, metrics.mean_cost])).all()


def test_a_compiled_training_step_on_cuda_has_the_eager_loss_and_update() -> None:
    """``train.compile`` on CUDA (CUDA graphs for the decisions, inductor for the replay): one
    float64 step from the same weights gives eager's rollouts, loss and updated weights, the
    tolerance ``tests/linc_core/model/test_compiled_results.py`` states for the CPU."""
    model, config = tiny_configs("full_linc", num_rollouts=6, batch_size=3)
    instance = generate("cvrptw", 3, 10, seed=5).to(device=CUDA, dtype=torch.float64)
    torch.manual_seed(0)
    start = LincPolicy(model).to(device=CUDA, dtype=torch.float64)
    outcome = {}
    for compiled in (False, True):
        policy = copy.deepcopy(start)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
        metrics = train_step(policy, optimizer, instance, replace(config, compile=compiled), 0.5, 3)
        outcome[compiled] = (metrics, [p.detach().clone() for p in policy.parameters()])
    (eager, eager_weights), (fused, fused_weights) = outcome[False], outcome[True]
    assert (fused.mean_cost, fused.best_cost) == (eager.mean_cost, eager.best_cost)
    assert fused.loss == pytest.approx(eager.loss, rel=1e-9, abs=1e-12)
    for a, b in zip(eager_weights, fused_weights, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
