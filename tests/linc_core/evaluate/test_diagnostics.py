"""Mechanism diagnostics: centring makes the comparator blind to common offsets, raw does not."""

from __future__ import annotations

import json
import math

import pytest
import torch

from linc_core.commands.diagnose import main
from linc_core.config import ModelConfig
from linc_core.evaluate.diagnostics import run_diagnostics
from linc_core.instances import Instance, read_solomon, truncate_customers
from tests.conftest import PNG_MAGIC, tiny_checkpoint, tiny_policy


@pytest.fixture(scope="module")
def instances(data_dir) -> Instance:
    files = ("C101.txt", "R201.txt")
    return Instance.concat(
        [truncate_customers(read_solomon(data_dir / "solomon100" / f), 20) for f in files]
    )


def test_translation_probe_centred_is_invariant_raw_drifts(instances):
    result = run_diagnostics(tiny_policy(), instances, num_z=4, offsets=(0.0, 0.5, 4.0))
    probe = result["translation_probe"]
    assert result["decisions"] > 50
    assert probe["tv_drift_centred"][0] == 0.0 and probe["tv_drift_raw"][0] == 0.0
    # float32 round-off only (a shifted-then-centred feature differs from the original by ulps)
    assert max(probe["tv_drift_centred"]) < 1e-5
    assert max(probe["top1_flip_rate_centred"]) == 0.0
    # without centring, the common offset moves every score and the clipping turns it into drift
    assert probe["tv_drift_raw"][2] > 1e-3
    assert probe["tv_drift_raw"][2] > 100 * max(probe["tv_drift_centred"])


def test_modulation_and_weight_tables_account_for_every_decision(instances):
    result = run_diagnostics(tiny_policy(seed=1), instances, num_z=2, offsets=(0.0,))
    modulation, weights = result["modulation"], result["comparator_weights"]
    assert sum(modulation["decisions"]) == result["decisions"]
    assert sum(weights["decisions"]) == result["decisions"]
    assert weights["features"] == list(ModelConfig().candidate_features)
    # nothing can be grouped above the 20 customers these instances have
    assert weights["decisions"][-1] == 0 and weights["mean_weight"][-1] == [None] * 6


@pytest.mark.parametrize(
    ("alpha_bias", "zero_comparator", "alpha", "local_only"),
    [
        (math.log(3.0), False, 0.75, None),  # sigmoid(ln 3) = 3 / (1 + 3); both parts move
        (-1e4, False, 0.0, True),  # gate closed: alpha u_base = 0, only the local score moves
        (0.0, True, 0.5, False),  # comparator v = W_phi^T h~ = 0: only the base score moves
    ],
)
def test_modulation_table_reports_the_gate_and_the_local_share(
    instances, alpha_bias, zero_comparator, alpha, local_only
):
    """With the gate's weights zeroed, alpha = sigmoid(bias) at every decision, so every
    progress bin's mean is that number. Closing the gate or zeroing the comparator leaves one
    score part alone: the local share is 1 or 0 at every decision, except that a decision with
    one feasible customer has no spread in either part and counts as share 0."""
    policy = tiny_policy(seed=1)
    scorer = policy.scorer
    with torch.no_grad():
        scorer.summary_to_alpha.weight.zero_()
        scorer.summary_to_alpha.bias.fill_(alpha_bias)
        if zero_comparator:  # W_phi and b_phi: v and its beta branch vanish
            scorer.full_phi_proj.weight.zero_()
            scorer.full_phi_proj.bias.zero_()
    result = run_diagnostics(policy, instances, num_z=2, offsets=(0.0,))
    modulation, by_size = result["modulation"], result["comparator_weights"]
    counts = modulation["decisions"]
    filled = [i for i, count in enumerate(counts) if count > 0]
    assert len(filled) >= 5  # decisions spread over construction progress
    for i in filled:
        assert modulation["alpha_mean"][i] == pytest.approx(alpha, abs=1e-6)
    if local_only is not None:
        # Decisions with share 1, summed over the bins (the first size group is |F| = 1).
        shares = sum(modulation["local_share_mean"][i] * counts[i] for i in filled)
        expected = result["decisions"] - by_size["decisions"][0] if local_only else 0
        assert shares == pytest.approx(expected, abs=1e-4)


def test_a_model_without_the_linc_comparator_is_refused(instances):
    baseline = tiny_policy("baseline")
    with pytest.raises(ValueError, match="scorer is 'baseline'"):
        run_diagnostics(baseline, instances)


def test_command_writes_json_and_plots(data_dir, tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "tiny.pt")
    out = tmp_path / "diag"
    status = main(
        ["--checkpoint", str(checkpoint), "--limit", "1", "--z", "2", "--out", str(out),
         "--offsets", "0,1"]
    )  # fmt: skip
    assert status == 0
    result = json.loads((out / "diagnostics.json").read_text())
    assert result["translation_probe"]["offsets"] == [0.0, 1.0]
    for name in ("translation_probe.png", "modulation.png", "comparator_weights.png"):
        assert (out / name).read_bytes().startswith(PNG_MAGIC)
