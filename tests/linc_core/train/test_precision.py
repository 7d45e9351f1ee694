"""Mixed precision (``linc_core.train.precision``) and the bf16 path on CPU."""

from __future__ import annotations

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.model.replay import backward_replay
from linc_core.train import GeneratedData, fit, train_step
from linc_core.train.checkpoint import build_payload, load_checkpoint, save_checkpoint
from linc_core.train.data import generate
from linc_core.train.precision import effective_precision, resolve_precision
from linc_core.train.step import advantages, rollout_draws
from tests.conftest import tiny_configs


def test_auto_resolves_to_fp32_the_faster_measured_on_cuda_and_cpu() -> None:
    assert effective_precision("auto", "cuda:1") == "fp32"
    assert effective_precision("auto", "cpu") == "fp32"
    assert resolve_precision("fp16", "cuda").needs_scaler
    assert resolve_precision("bf16", "cpu").dtype == torch.bfloat16
    assert resolve_precision("fp32", "cuda").dtype is None
    with pytest.raises(ValueError, match="fp16 needs a CUDA device, got device cpu"):
        resolve_precision("fp16", "cpu")


def _gradient(
    policy: LincPolicy, precision_name: str, instance, trajectory, weight
) -> torch.Tensor:
    precision = resolve_precision(precision_name, "cpu")
    policy.zero_grad()
    with precision.autocast():
        encoded = policy.encode(instance)
    backward_replay(
        policy,
        trajectory,
        encoded.cache,
        weight,
        loss_scale=-1.0 / weight.numel(),
        chunk_rollouts=2,
        autocast=precision.autocast,
    )
    return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])


def test_bf16_autocast_on_cpu_gives_the_fp32_gradient_of_the_same_rollouts() -> None:
    """The training step's gradient pass under bf16 autocast, on rollouts sampled in fp32:
    cosine >= 0.99 with the fp32 gradient and relative error under 15% (bf16 keeps 8 bits)."""
    model, config = tiny_configs("full_linc", num_rollouts=8, batch_size=4)
    torch.manual_seed(0)
    policy = LincPolicy(model)
    instance = generate("cvrptw", 4, 20, seed=2)
    draws = rollout_draws(policy, instance, 8, False, seed=5)
    with torch.no_grad():
        sampled = policy.rollout(
            instance, 8, z=draws.z, sample_seeds=draws.sample_seeds, keep_trajectory=True
        )
    advantage, mask, _ = advantages(sampled.cost.float(), config, 0.1)
    weight = advantage * mask
    fp32 = _gradient(policy, "fp32", instance, sampled.trajectory, weight)
    bf16 = _gradient(policy, "bf16", instance, sampled.trajectory, weight)
    cosine = float(torch.nn.functional.cosine_similarity(bf16, fp32, dim=0))
    assert cosine >= 0.99
    assert float((bf16 - fp32).norm() / fp32.norm()) < 0.15


def test_a_bf16_training_step_and_fit_run_on_cpu() -> None:
    model, config = tiny_configs(
        "full_linc", num_rollouts=4, batch_size=2, instances_per_epoch=4, epochs=1,
        precision="bf16", validation_size=0,
    )  # fmt: skip
    torch.manual_seed(0)
    policy = LincPolicy(model)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    precision = resolve_precision("bf16", "cpu")
    before = [p.detach().clone() for p in policy.parameters()]
    metrics = train_step(
        policy, optimizer, generate("cvrptw", 2, 8, seed=1), config, 0.3, 7, precision=precision
    )
    assert torch.isfinite(torch.tensor([metrics.loss, metrics.grad_norm])).all()
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert all(p.dtype == torch.float32 for p in policy.parameters())  # autocast, not a cast
    result = fit(LincPolicy(model), config, GeneratedData("cvrptw", 8, 2, 4, seed=1))
    assert result.precision == "bf16" and result.epochs_done == 1


def test_fp16_needs_a_gradient_scaler() -> None:
    model, config = tiny_configs("baseline", num_rollouts=4, batch_size=2)
    policy = LincPolicy(model)
    optimizer = torch.optim.Adam(policy.parameters())
    fp16 = resolve_precision("fp16", "cuda")  # resolving needs no GPU; stepping would
    with pytest.raises(ValueError, match="precision fp16 needs a GradScaler"):
        train_step(policy, optimizer, generate("cvrptw", 2, 6, seed=0), config, 0.0, 0,
                   precision=fp16)  # fmt: skip


@pytest.mark.parametrize(("amp", "device", "precision"), [
    (True, "cuda", "fp16"), (True, "cpu", "fp32"), (False, "cuda", "fp32"),
])  # fmt: skip
def test_checkpoints_written_with_amp_load_with_the_precision_they_ran(
    tmp_path, amp: bool, device: str, precision: str
) -> None:
    """Before ``precision``, ``amp: true`` meant fp16 on CUDA and fp32 elsewhere."""
    model, config = tiny_configs("baseline")
    payload = build_payload(
        model_config=model, train_config=config, model_state=LincPolicy(model).state_dict(),
        optimizer_state=None, epoch=1, global_step=1, history=[], data_id=None,
    )  # fmt: skip
    train = dict(payload["train_config"])
    del train["precision"]
    payload["train_config"] = {**train, "amp": amp, "device": device}
    path = save_checkpoint(tmp_path / "latest.pt", payload)
    assert load_checkpoint(path)["train_config"].precision == precision
