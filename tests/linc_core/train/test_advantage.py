"""Advantages, normalisation, best-only mask and tau schedule against the reference's values."""

from __future__ import annotations

import pytest
import torch

from linc_core.train.advantage import (
    best_only_mask,
    group_mean_advantage,
    normalise_advantage,
    soft_top1_advantage,
    tau_at,
)
from tests.golden import load_golden


def golden_advantage(mode: str, tau: float | None, normalise: bool, cost: torch.Tensor):
    advantage = (
        group_mean_advantage(cost) if mode == "group_mean" else soft_top1_advantage(cost, tau)
    )
    return normalise_advantage(advantage) if normalise else advantage


def test_every_mode_matches_reference() -> None:
    golden = load_golden("advantage_golden.json")
    cost = torch.tensor(golden["costs"], dtype=torch.float64)
    assert len(golden["cases"]) == 10
    for case in golden["cases"]:
        got = golden_advantage(case["mode"], case["tau"], case["normalize_adv"], cost)
        torch.testing.assert_close(
            got, torch.tensor(case["advantage"], dtype=torch.float64), atol=1e-6, rtol=0
        )


def test_best_only_mask_and_tau_schedule_match_reference() -> None:
    golden = load_golden("advantage_golden.json")
    cost = torch.tensor(golden["costs"])
    assert best_only_mask(cost).tolist() == golden["best_only_mask"]
    for point in golden["tau_schedule"]:
        assert tau_at(point["progress"], 4.0, 0.25, 1 / 300) == pytest.approx(
            point["tau"], abs=1e-6
        )


def test_soft_top1_tends_to_group_mean_as_tau_grows() -> None:
    """The gap to the group-mean advantage shrinks like 1/tau."""
    cost = torch.tensor(
        [[10.0, 12.0, 11.0, 15.0, 10.5], [3.0, 3.5, 2.0, 9.0, 4.0]], dtype=torch.float64
    )
    reference = group_mean_advantage(cost)
    taus = (1e2, 1e4, 1e7)
    errors = [(soft_top1_advantage(cost, t) - reference).abs().max().item() for t in taus]
    assert errors[1] / errors[2] == pytest.approx(1e3, rel=0.05)  # O(1 / tau)
    assert errors[2] < 2e-6


def test_soft_top1_becomes_top1_credit_as_tau_vanishes() -> None:
    """As tau -> 0 only the best rollout gains; all others get one and the same penalty.

    That is hard top-1 credit: the update raises the best rollout and lowers the rest
    uniformly, with no ranking among the non-best (at tau = 10 they are still ranked).
    """
    cost = torch.tensor([[10.0, 12.0, 11.0, 15.0, 10.5]], dtype=torch.float64)
    for tau in (1e-2, 1e-3):
        a = soft_top1_advantage(cost, tau)[0]
        assert a[0] > 0 and (a[1:] < 0).all()
        assert (a[1:] - a[1]).abs().max() < 1e-12 * a[0]
    ranked = soft_top1_advantage(cost, 10.0)[0]
    assert ranked[4] > ranked[2] > ranked[1] > ranked[3]  # costs 10.5 < 11 < 12 < 15
