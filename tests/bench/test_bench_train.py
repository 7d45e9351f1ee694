"""The multiply-add count the train bench quotes, checked against torch's FLOP counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.bench_train import _ours_step_seconds, bf16_matrix_units, decision_multiply_adds
from linc_core.model import LincPolicy
from linc_core.model.sampling import row_seeds, sample_z
from linc_core.presets import preset_configs
from linc_core.problems import make_env
from linc_core.problems.rollout import start_rollouts
from linc_core.train.data import generate


@pytest.mark.parametrize(
    "preset", ["full_linc", "baseline", "naive_mlp", "no_step_summary", "full_mu_summary"]
)
def test_decision_multiply_adds_match_the_counted_matrix_products(preset: str) -> None:
    """One decision of every rollout, counted by ``FlopCounterMode``, equals the formula less
    what the counter leaves out: CPU attention (the glimpse, ``2 N d``) and matrix-vector
    products (the mlp scorer's output layer, ``N H``; the bias half of the comparator's
    per-batch folding), plus that folding's matrix half (``(P + 1) d H`` once per batch)."""
    model, _ = preset_configs(preset)
    batch, rollouts, n = 2, 8, 10
    torch.manual_seed(0)
    policy = LincPolicy(model)
    instance = generate("cvrptw", batch, n, seed=0)
    env = make_env(instance, rollouts)
    state, _ = start_rollouts(env)
    assert bool((state.mask.sum(-1) > 1).all())  # every rollout decides at the reset state
    z = sample_z(row_seeds(0, batch), rollouts, model.z_dim)
    with torch.no_grad():
        encoded = policy.encode(instance)
        with FlopCounterMode(display=False) as counter:
            policy.step_scores(env, state, encoded.cache, encoded.time_scale, z)
    counted = counter.get_total_flops() / 2
    d, nodes = model.embedding_dim, n + 1
    hidden = model.scorer_hidden_dim
    uncounted, per_batch = 2 * nodes * d, 0
    if model.scorer == "mlp":
        uncounted += nodes * hidden
    if model.scorer == "linc" and model.summary != "none":
        per_batch = (len(model.candidate_features) + int(model.phi_bias)) * d * hidden
    expected = (decision_multiply_adds(model, nodes) - uncounted) * batch * rollouts
    assert counted == expected + per_batch


@pytest.mark.bench
def test_rl4co_decoding_steps_count_one_training_step_s_decisions() -> None:
    """The peer's decoding steps are counted per training step, not summed over steps: every
    rollout visits each of the n customers once, returning to the depot at most once between
    two, so a step takes n to 2 n decisions (rl4co is the bench's peer, installed by
    ``make bench``, which runs the tests marked ``bench``)."""
    from bench.bench_train import rl4co_step_seconds

    model, _ = preset_configs("full_linc")
    n, counted = 10, {}
    run = rl4co_step_seconds(2, 4, n, 0, model, decoding_steps=counted)
    lengths = []
    for step in range(3):
        assert run(step) > 0
        lengths.append(counted["last"])
    assert all(n <= steps <= 2 * n for steps in lengths), lengths
    assert set(counted) == {"last"}


def test_the_bf16_row_s_runner_trains_under_the_named_precision() -> None:
    """The runner resolves ``precision`` as a run does (fp16 is refused on CPU) and steps in
    bf16; the row names the CPU's bf16 matrix units, which decide whether bf16 can pay."""
    with pytest.raises(ValueError, match="fp16 needs a CUDA device"):
        _ours_step_seconds("full_linc", 2, 4, 8, 0, precision="fp16")
    assert _ours_step_seconds("full_linc", 2, 4, 8, 0, precision="bf16")(0) > 0
    assert bf16_matrix_units() in {"AMX", "AVX512-BF16", "none", "unknown"}
