"""The multiply-add count the train bench quotes, checked against torch's FLOP counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.bench_train import decision_multiply_adds
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
