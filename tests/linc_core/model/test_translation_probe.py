"""Common-translation probe (paper, mechanism diagnostics): a shared offset on the relative
features of the feasible customers leaves the centred scorers' customer distribution unchanged
and moves the uncentred ones, on the reference weights and at random initialisation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.model import (
    LincPolicy,
    load_reference_state_dict,
    map_reference_keys,
    row_seeds,
    sample_z,
)
from linc_core.model.feasible_set import feasible_customers
from linc_core.presets import preset_configs
from linc_core.problems import CVRPTWEnv, generate_cvrptw_envelope
from tests.conftest import tiny_policy
from tests.golden import reference_state_dict


def probe_state(seed: int = 3, n: int = 12):
    """A CVRPTW decision state one customer into a route, with several feasible customers."""
    instance = generate_cvrptw_envelope(1, n, seed)
    env = CVRPTWEnv(instance, num_rollouts=2)
    state = env.reset()
    travel = env.consequences(state)[..., 0].masked_fill(~state.mask, math.inf)
    state = env.step(state, travel.argmin(-1))  # the nearest customer
    assert bool((state.current > 0).all())
    assert int(feasible_customers(state.mask, True).sum(-1).min()) >= 4
    return instance, env, state


def customer_distribution(
    policy: LincPolicy,
    instance: Instance,
    env: CVRPTWEnv,
    state,
    z: Tensor,
    delta: Tensor,
    monkeypatch: pytest.MonkeyPatch,
) -> Tensor:
    """Probabilities over the customers (renormalised) with ``delta`` added to the relative
    features of every feasible customer; the decoder state, mask and summary r_t stay those
    of the unshifted table (the paper's probe fixes the state and moves only the table)."""
    table = env.consequences(state)
    feasible = feasible_customers(state.mask, True)
    relative = torch.tensor([name in env.relative_features for name in env.feature_names])
    offset = torch.zeros(len(env.feature_names), dtype=table.dtype)
    offset[relative] = delta.to(table.dtype)
    shifted = table + feasible.unsqueeze(-1) * offset
    with monkeypatch.context() as patch:
        patch.setattr(env, "consequences", lambda _state: shifted)
        original_summary = policy.scorer.step_summary
        patch.setattr(
            policy.scorer,
            "step_summary",
            lambda _table, feasible, n, _stats=None: original_summary(table, feasible, n),
        )
        with torch.no_grad():
            cache, time_scale = policy.encode(instance)
            scores = policy.step_scores(env, state, cache, time_scale, z)
            probs = policy.log_probs(scores, state.mask).exp()
    customers = probs[..., 1:]
    return customers / customers.sum(-1, keepdim=True)


PROBE_DELTAS = [
    [0.3, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.5, -0.5, 0.5, 0.5],
    [1.0, -2.0, 3.0, 0.5, -1.5],
    [-4.0, 2.5, 5.0, -3.0, 4.0],
]


def probe_drift(policy: LincPolicy, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Largest change of the customer distribution for each of ``PROBE_DELTAS``."""
    instance, env, state = probe_state()
    z = sample_z(row_seeds(5, 1), 2, 16)
    before = customer_distribution(policy, instance, env, state, z, torch.zeros(5), monkeypatch)
    drift = []
    for delta in PROBE_DELTAS:
        after = customer_distribution(
            policy, instance, env, state, z, torch.tensor(delta), monkeypatch
        )
        drift.append((after - before).abs().max().item())
    return drift


def test_common_translation_probe_reference_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paper's probe on the reference weights: with centring the customer distribution is
    unchanged (<= 1e-5) by any shared offset; the same weights without centring (raw_linear)
    drift by more than 1e-4 for every offset."""
    state_dict = reference_state_dict()
    linc = LincPolicy(preset_configs("full_linc")[0]).eval()
    raw = LincPolicy(preset_configs("raw_linear")[0]).eval()
    for policy in (linc, raw):
        load_reference_state_dict(policy, state_dict)
    no_summary = LincPolicy(preset_configs("no_step_summary")[0]).eval()
    mapped, _ = map_reference_keys(state_dict)
    mapped = {key: value for key, value in mapped.items() if key in no_summary.state_dict()}
    no_summary.load_state_dict(mapped, strict=True)

    for policy in (linc, no_summary):
        drift = probe_drift(policy, monkeypatch)
        assert max(drift) <= 1e-5, drift
    drift = probe_drift(raw, monkeypatch)
    assert min(drift) > 1e-4, drift


def test_common_translation_probe_random_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every centred scorer is invariant, the MLP on centred rows included (paper: it keeps
    translation invariance); the uncentred ones move under the largest offset."""
    for preset, invariant in (
        ("full_linc", True),
        ("full_mu_summary", True),
        ("no_step_summary", True),
        ("centered_mlp", True),
        ("raw_linear", False),
        ("naive_mlp", False),
    ):
        drift = probe_drift(tiny_policy(preset, "cvrptw", seed=11), monkeypatch)
        if invariant:
            assert max(drift) <= 1e-5, (preset, drift)
        else:
            assert drift[-1] > 1e-4, (preset, drift)
