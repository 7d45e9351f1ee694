"""The LINC policy against the reference implementation's own recorded outputs.

- golden replay: the reference's full_linc weights reproduce its probabilities step by step;
- the reference's initialisation replayed for every ablation variant, and the weight mapping
  refusing what it cannot load, by name;
- the presets scored by <h, E_j> (baseline, no_local) against the reference equations written
  out plainly;
- a reference trainer checkpoint (model_params + model_state_dict) rebuilds the golden model.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from linc_core.instances import Instance
from linc_core.model import (
    LincPolicy,
    load_reference_state_dict,
    reference_initial_state_dict,
    row_seeds,
    sample_z,
)
from linc_core.model.features import node_inputs
from linc_core.presets import ABLATION_VARIANTS, preset_configs
from linc_core.problems import CVRPTWEnv, make_env, random_feasible_actions
from tests.conftest import make_instances
from tests.golden import load_golden, reference_state_dict
from tests.linc_core.problems.cvrptw.test_env import instance_from_golden


def assert_reproduces_golden_probabilities(policy: LincPolicy) -> None:
    """Replay golden case 0 with the two golden z vectors; probabilities within 1e-5."""
    golden = load_golden("linc_model_golden.json")
    case = load_golden("cvrptw_env_golden.json")["cases"][0]
    instance = instance_from_golden(case)
    policy.eval()
    z = torch.tensor(golden["z"]).unsqueeze(0)  # [1, 2, 16]
    env = CVRPTWEnv(instance, num_rollouts=2)
    state = env.reset()
    recorded = {record["step"]: record for record in golden["steps"]}
    assert sorted(recorded) == [record["step"] for record in case["steps"]]
    with torch.no_grad():
        cache, time_scale = policy.encode(instance)
        for record, action in zip(case["steps"], case["actions"][1:], strict=True):
            scores = policy.step_scores(env, state, cache, time_scale, z)
            probs = policy.log_probs(scores, state.mask).exp()[0]  # [2, N]
            expected = torch.tensor(recorded[record["step"]]["probs_per_z"])
            torch.testing.assert_close(probs, expected, atol=1e-5, rtol=0)
            state = env.step(state, torch.tensor([[action, action]]))
    assert bool(state.finished.all())


def test_golden_model_replay_reproduces_reference_probabilities() -> None:
    """The reference's full_linc weights give its probabilities at every step (1e-5)."""
    golden = load_golden("linc_model_golden.json")
    case = load_golden("cvrptw_env_golden.json")["cases"][0]
    instance = instance_from_golden(case)
    config = preset_configs("full_linc")[0]
    policy = LincPolicy(config)
    dropped = load_reference_state_dict(policy, reference_state_dict())
    assert dropped and all(key.startswith("decoder.full_") for key in dropped)
    policy.eval()

    static = node_inputs(instance, config).static[0]
    torch.testing.assert_close(
        static, torch.tensor(golden["node_static_features"]), atol=1e-5, rtol=0
    )

    assert_reproduces_golden_probabilities(policy)


GOLDEN_INIT_SEED = 20261122  # linc_model_golden.json: "its own initialisation (torch seed ...)"
GOLDEN_NOISE_STD = 0.05  # "... plus 0.05 N(0,1) noise on every parameter"


def test_reference_initialisation_recovers_the_golden_weights() -> None:
    """The golden state dict is the reference model's own initialisation for seed 20261122 plus
    0.05 N(0, 1) noise. Replaying the reference's construction order for that seed must leave
    exactly that noise on every tensor (residual std 0.05), while a neighbouring seed leaves the
    weights' own spread as well: this pins every tensor's place in the reference's draw order."""
    golden = reference_state_dict()
    config = preset_configs("full_linc")[0]
    replayed = reference_initial_state_dict(config, GOLDEN_INIT_SEED)
    assert set(replayed) == set(golden)
    residuals = []
    for key, value in golden.items():
        assert replayed[key].shape == value.shape, key
        residual = (value.double() - replayed[key].double()).flatten()
        residuals.append(residual)
        if residual.numel() >= 64:  # within 5 standard errors of a sample std
            tolerance = 5 * GOLDEN_NOISE_STD / math.sqrt(2 * (residual.numel() - 1))
            assert abs(float(residual.std()) - GOLDEN_NOISE_STD) < tolerance, key
    every = torch.cat(residuals)
    assert abs(float(every.std()) - GOLDEN_NOISE_STD) < 0.001
    assert float(every.abs().max()) < 6 * GOLDEN_NOISE_STD
    neighbour = reference_initial_state_dict(config, GOLDEN_INIT_SEED + 1)
    weight = "encoder.layers.0.Wq.weight"
    assert float((golden[weight] - neighbour[weight]).std()) > 1.5 * GOLDEN_NOISE_STD


@pytest.mark.parametrize("preset", ABLATION_VARIANTS)
def test_reference_initialisation_fits_every_ablation_variant(preset: str) -> None:
    """Each of the twelve variants loads its replayed reference start; the global generator is
    left alone; the same seed gives the same weights and another seed other weights."""
    config = preset_configs(preset)[0]
    rng_before = torch.random.get_rng_state()
    state = reference_initial_state_dict(config, 1234)
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    policy = LincPolicy(config)
    dropped = load_reference_state_dict(policy, state)
    assert all(key.startswith("decoder.") for key in dropped)
    if config.summary == "none" and config.scorer == "linc":
        assert any(".summary_input_proj." in key for key in dropped)
    loaded = policy.state_dict()
    again = reference_initial_state_dict(config, 1234)
    other = reference_initial_state_dict(config, 1235)
    weight = "decoder.poly_layer_1.weight"
    assert torch.equal(loaded[weight], again[weight])
    assert not torch.equal(loaded[weight], other[weight])


@pytest.mark.parametrize(
    ("preset", "problem", "fragment"),
    [("pomo", "cvrptw", "z_dim 0"), ("full_linc", "tsp", "problem 'tsp'")],
)
def test_reference_initialisation_refuses_models_the_reference_does_not_build(
    preset: str, problem: str, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        reference_initial_state_dict(preset_configs(preset, problem)[0], 1234)


def test_reference_state_dict_with_missing_key_is_rejected_by_name() -> None:
    state_dict = reference_state_dict()
    policy = LincPolicy(preset_configs("full_linc")[0])
    broken = dict(state_dict)
    del broken["decoder.quotient_lite_candidate_scorer.summary_to_alpha.bias"]
    with pytest.raises(ValueError, match=r"missing \['scorer\.summary_to_alpha\.bias'\]"):
        load_reference_state_dict(policy, broken)
    extra = dict(state_dict)
    extra["decoder.unknown_module.weight"] = torch.zeros(1)
    with pytest.raises(ValueError, match=r"unexpected \['decoder\.unknown_module\.weight'\]"):
        load_reference_state_dict(policy, extra)
    # A model whose switches differ (no Depth Mixer) cannot take full_linc weights.
    other = LincPolicy(preset_configs("no_depth_mixer")[0])
    with pytest.raises(ValueError, match="encoder.depth_queries"):
        load_reference_state_dict(other, state_dict)


def plain_instance_norm(x: Tensor, norm: torch.nn.InstanceNorm1d) -> Tensor:
    """Per instance and channel over the nodes: biased variance, eps, affine."""
    mean = x.mean(1, keepdim=True)
    var = x.var(1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def plain_attention(query: Tensor, key: Tensor, value: Tensor, heads: int, allowed=None):
    """Multi-head attention written out: ``softmax(q k^T / sqrt(d_h) + mask) v`` per head."""
    b, m, d = query.shape
    n = key.shape[1]
    split = lambda t, rows: t.reshape(b, rows, heads, d // heads).transpose(1, 2)  # noqa: E731
    weights = split(query, m) @ split(key, n).transpose(-1, -2) / math.sqrt(d // heads)
    if allowed is not None:
        weights = weights + torch.where(allowed, 0.0, -math.inf).to(weights.dtype).unsqueeze(1)
    return torch.softmax(weights, -1) @ split(value, n)  # [B, H, M, d_h]


def plain_encoder(policy: LincPolicy, instance: Instance) -> Tensor:
    """The reference's CVRPTW encoder (POMO layers, optional GateAttn and Depth Mixer) from
    the policy's weights, with none of the module's own code paths."""
    enc, config = policy.encoder, policy.config
    inputs = node_inputs(instance, config)
    lin = torch.nn.functional.linear
    x = torch.cat(
        [
            lin(inputs.depot, enc.embedding_depot.weight, enc.embedding_depot.bias).unsqueeze(1),
            lin(inputs.nodes, enc.embedding_node.weight, enc.embedding_node.bias),
        ],
        dim=1,
    )
    history = [x]
    for index, layer in enumerate(enc.layers):
        if config.depth_mixer:
            values = torch.stack(history, 2)  # [B, N, M, D]
            keys = values * torch.rsqrt(
                values.pow(2).mean(-1, keepdim=True) + enc.depth_key_norm.eps
            )
            keys = keys * enc.depth_key_norm.weight
            mix = torch.softmax(keys @ enc.depth_queries[index], -1)  # [B, N, M]
            x = (mix.unsqueeze(-1) * values).sum(2)
        else:
            x = history[-1]
        attended = plain_attention(
            x @ layer.Wq.weight.t(),
            x @ layer.Wk.weight.t(),
            x @ layer.Wv.weight.t(),
            config.num_heads,
        )
        if config.gated_attention:
            gate = 2.0 * torch.sigmoid(lin(x, layer.W_gate.weight, layer.W_gate.bias))  # [B, N, H]
            attended = attended * gate.transpose(1, 2).unsqueeze(-1)
        b, _, n, _ = attended.shape
        combined = lin(
            attended.transpose(1, 2).reshape(b, n, -1),
            layer.multi_head_combine.weight,
            layer.multi_head_combine.bias,
        )
        out = plain_instance_norm(x + combined, layer.norm_attention.norm)
        hidden = torch.relu(lin(out, layer.ff_in.weight, layer.ff_in.bias))
        out = plain_instance_norm(
            out + lin(hidden, layer.ff_out.weight, layer.ff_out.bias), layer.norm_ff.norm
        )
        history.append(out)
    return history[-1]


def plain_probabilities(
    policy: LincPolicy, embeddings: Tensor, state, time_scale: Tensor, z: Tensor
) -> Tensor:
    """The reference decoder with the ``<h, E_j>`` scorer: glimpse from ``[E_cur; load;
    time]``, the z residual, ``10 tanh(<h, E_j> / sqrt(d))``, masked softmax."""
    dec, config = policy.decoder, policy.config
    lin = torch.nn.functional.linear
    current = embeddings.gather(
        1, state.current.unsqueeze(-1).expand(-1, -1, embeddings.shape[-1])
    )  # [B, K, D]
    context = torch.cat(
        [current, state.load.unsqueeze(-1), (state.time / time_scale.unsqueeze(1)).unsqueeze(-1)],
        dim=-1,
    )
    glimpse = plain_attention(
        context @ dec.Wq_last.weight.t(),
        embeddings @ dec.Wk.weight.t(),
        embeddings @ dec.Wv.weight.t(),
        config.num_heads,
        allowed=state.mask,
    )
    b, _, k, _ = glimpse.shape
    h = lin(
        glimpse.transpose(1, 2).reshape(b, k, -1),
        dec.multi_head_combine.weight,
        dec.multi_head_combine.bias,
    )
    poly = torch.relu(lin(torch.cat([h, z], -1), dec.poly_layer_1.weight, dec.poly_layer_1.bias))
    h = h + lin(poly, dec.poly_layer_2.weight, dec.poly_layer_2.bias)
    logits = config.logit_clip * torch.tanh(h @ embeddings.transpose(1, 2) / math.sqrt(h.shape[-1]))
    return torch.softmax(logits.masked_fill(~state.mask, -math.inf), -1)


@pytest.mark.parametrize("preset", ["baseline", "no_local"])
def test_dot_product_presets_match_a_plain_derivation(preset: str) -> None:
    """The golden replay pins full_linc; the presets scored by ``<h, E_j>`` (the ablation's
    baseline without GateAttn and Depth Mixer, no_local with both) are checked here against
    the reference's equations written out plainly, at full width, along a random feasible
    episode: every step's probabilities agree to 1e-10 in float64."""
    batch, k = 2, 3
    torch.manual_seed(4)
    policy = LincPolicy(preset_configs(preset)[0]).double().eval()
    instance = make_instances("cvrptw", batch, 12, seed=9)
    z = sample_z(row_seeds(1, batch), k, policy.config.z_dim).double()
    generator = torch.Generator().manual_seed(2)
    env = make_env(instance, k)
    state = env.reset()
    steps = 0
    with torch.no_grad():
        cache, time_scale = policy.encode(instance)
        embeddings = plain_encoder(policy, instance)
        torch.testing.assert_close(cache.embeddings, embeddings, atol=1e-10, rtol=0)
        while not bool(state.finished.all()):
            ours = policy.log_probs(
                policy.step_scores(env, state, cache, time_scale, z), state.mask
            )
            plain = plain_probabilities(policy, embeddings, state, time_scale, z)
            torch.testing.assert_close(ours.exp(), plain, atol=1e-10, rtol=0)
            state = env.step(state, random_feasible_actions(state.mask, generator))
            steps += 1
    assert steps >= 12


def test_reference_model_params_rebuild_the_golden_model(tmp_path) -> None:
    """A reference trainer checkpoint (model_params + model_state_dict) loads as full_linc and
    replays the golden probabilities; each preset's switches survive the parameter mapping."""
    from linc_core.model.reference_format import (
        config_from_reference_params,
        load_reference_checkpoint,
    )

    golden = load_golden("linc_model_golden.json")
    config = config_from_reference_params(golden["model_params"])
    assert config == preset_configs("full_linc")[0]
    path = tmp_path / "checkpoint-1.pt"
    torch.save(
        {
            "epoch": 1,
            "model_params": golden["model_params"],
            "model_state_dict": reference_state_dict(),
        },
        path,
    )
    policy, loaded_config, _ = load_reference_checkpoint(str(path))
    assert loaded_config == config
    assert_reproduces_golden_probabilities(policy)
    for name, switches in {
        "raw_linear": {"qlite_feature_centering_mode": "raw"},
        "no_step_summary": {
            "qlite_disable_summary_modulation": True,
            "qlite_force_alpha_one": True,
        },
        "full_mu_summary": {"qlite_summary_mode": "full_mu"},
        "naive_mlp": {"candidate_scorer_type": "mlp_score_only", "mlp_score_feature_mode": "raw"},
        "centered_mlp": {
            "candidate_scorer_type": "mlp_score_only",
            "mlp_score_feature_mode": "centered",
        },
        "no_gateattn": {"use_gated_attention": False},
        "no_depth_mixer": {"use_depth_mixer": False},
    }.items():
        params = {**golden["model_params"], **switches}
        assert config_from_reference_params(params) == preset_configs(name)[0], name
    with pytest.raises(ValueError, match="candidate_scorer_type"):
        config_from_reference_params({**golden["model_params"], "candidate_scorer_type": "other"})
