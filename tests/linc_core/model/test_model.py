"""The LINC policy against the reference and against the paper's claims about the scorer.

- golden replay: the reference's full_linc weights reproduce its probabilities step by step;
- the presets scored by <h, E_j> (baseline, no_local) against the reference equations written
  out plainly;
- step summary r_t and centred rows phi against the reference scorer's own values;
- common-translation probe (paper, mechanism diagnostics): a shared offset on the relative
  features of the feasible customers leaves the centred scorers' customer distribution
  unchanged and moves the uncentred ones;
- permutation equivariance over customers for every scorer kind and problem;
- masked actions get probability exactly 0 and are never sampled, in every preset;
- every preset's rollouts: their costs are the verified route lengths, their log-likelihoods the
  replayed sum of step log-probabilities;
- the presets differ from full_linc in exactly the fields of reference section 5;
- config validation names the offending field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor

from linc_core.config import (
    ModelConfig,
    TrainConfig,
    config_differences,
)
from linc_core.decoding import actions_to_solution
from linc_core.instances import Instance
from linc_core.model import (
    LincPolicy,
    load_reference_state_dict,
    map_reference_keys,
    reference_initial_state_dict,
    row_seeds,
    sample_z,
)
from linc_core.model.feasible_set import (
    feasible_customers,
    feasible_weight,
    mask_offsets,
    masked_minima,
)
from linc_core.model.features import node_inputs
from linc_core.model.sampling import sample_with_uniforms
from linc_core.model.scorer import CandidateScorer
from linc_core.presets import ABLATION_VARIANTS, PRESETS, preset_configs
from linc_core.problems import (
    CONSEQUENCE_FEATURES,
    CVRPTWEnv,
    generate_cvrp,
    generate_cvrptw_envelope,
    generate_tsp,
    make_env,
    random_feasible_actions,
)
from linc_core.utils.typed import ConfigError, build, literal_values
from linc_core.verify import verify_instance
from tests.conftest import tiny_policy
from tests.golden import golden_path, load_golden
from tests.linc_core.problems.cvrptw.test_env import instance_from_golden

PROBLEMS = ("cvrptw", "cvrp", "tsp")
REFERENCE_STATE_DICT = "linc_cvrptw_full_linc_random_state_dict.pt"


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def make_instances(problem: str, batch: int, size: int, seed: int) -> Instance:
    """``size`` customers (CVRP/CVRPTW) or cities (TSP), float64."""
    if problem == "cvrptw":
        instance = generate_cvrptw_envelope(batch, size, seed)
    elif problem == "cvrp":
        instance = generate_cvrp(batch, size, seed, capacity=20.0)
    else:
        instance = generate_tsp(batch, size, seed)
    return instance.to(dtype=torch.float64)


def rollout_inputs(
    policy: LincPolicy, batch: int, k: int, seed: int
) -> tuple[Tensor | None, Tensor | None]:
    """(z, forced starts) as ``LincPolicy.rollout`` expects them for this config."""
    z = None
    if policy.config.z_dim > 0:
        z = sample_z(row_seeds(seed, batch), k, policy.config.z_dim)
    starts = None
    if policy.config.z_dim == 0:  # POMO multi-start: rollout k starts at customer / city k + 1
        starts = torch.arange(1, k + 1).expand(batch, k).clone()
    elif policy.config.problem == "tsp":
        starts = torch.zeros(batch, k, dtype=torch.long)
    return z, starts


def drive(
    policy: LincPolicy,
    instance: Instance,
    k: int,
    z: Tensor | None,
    starts: Tensor | None,
    choose: Callable[[int, Tensor, Tensor], Tensor],
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The decoding loop of ``LincPolicy.rollout``, exposing every step.

    ``choose(step, log_probs, mask) -> action``. Returns, per step, (raw scores u, log-probs,
    mask) of the state the action was chosen in.
    """
    env = make_env(instance, k)
    cache, time_scale = policy.encode(instance)
    state = env.reset()
    if starts is not None:
        assert bool(state.mask.gather(-1, starts.unsqueeze(-1)).all())
        state = env.step(state, starts)
    records = []
    for step in range(env.max_steps):
        if bool(state.finished.all()):
            break
        scores = policy.step_scores(env, state, cache, time_scale, z)
        log_probs = policy.log_probs(scores, state.mask)
        action = choose(step, log_probs, state.mask)
        records.append((scores, log_probs, state.mask))
        state = env.step(state, action)
    assert bool(state.finished.all())
    return records


# ---------------------------------------------------------------------------------------------
# 1. golden model replay
# ---------------------------------------------------------------------------------------------
def reference_state_dict() -> dict[str, Tensor]:
    return torch.load(golden_path(REFERENCE_STATE_DICT), weights_only=True)


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


# ---------------------------------------------------------------------------------------------
# 2. step summary and centred rows against the reference scorer
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case_index", [0, 1])
def test_summary_and_centred_rows_match_reference(case_index: int) -> None:
    """r_t (partial and full mean) and the centred rows, depot row included, at every step.

    When no customer is feasible the reference floors |F| at 1 (rho = 1/n) where the paper's
    formula gives 0; we keep the reference's constant (only the depot is feasible there, so the
    policy is the same either way) and match its recorded values at every step.
    """
    case = load_golden("cvrptw_env_golden.json")["cases"][case_index]
    instance = instance_from_golden(case)
    n = instance.num_customers
    partial = CandidateScorer(preset_configs("full_linc")[0])
    full_mean = CandidateScorer(preset_configs("full_mu_summary")[0])
    env = CVRPTWEnv(instance, num_rollouts=1)
    state = env.reset()
    empty_steps = 0
    for record, action in zip(case["steps"], case["actions"][1:], strict=True):
        table = env.consequences(state)
        feasible = feasible_customers(state.mask, has_depot=True)
        assert feasible[0, 0].nonzero().flatten().tolist() == record["feasible_customers"]
        got_partial = partial.step_summary(table, feasible, n)[0, 0]
        got_full = full_mean.step_summary(table, feasible, n)[0, 0]
        want_partial = torch.tensor(record["summary_partial"])
        want_full = torch.tensor(record["summary_full_mean"])
        assert got_partial.shape == (4,) and got_full.shape == (7,)
        if not record["feasible_customers"]:
            empty_steps += 1
            assert state.mask[0, 0].tolist() == [True] + [False] * n  # only the depot
            assert record["summary_partial"][0] == pytest.approx(1.0 / n, abs=1e-5)
        torch.testing.assert_close(got_partial, want_partial, atol=1e-5, rtol=0)
        torch.testing.assert_close(got_full, want_full, atol=1e-5, rtol=0)

        for scorer in (partial, full_mean):
            phi, ratio = scorer.centred_features(table, state.mask, has_depot=True)
            torch.testing.assert_close(
                phi[0, 0, 0], torch.tensor(record["centered_features_depot"]), atol=1e-5, rtol=0
            )
            torch.testing.assert_close(
                phi[0, 0, 1:],
                torch.tensor(record["centered_features_customers"]),
                atol=1e-5,
                rtol=0,
            )
            assert ratio.item() == pytest.approx(max(len(record["feasible_customers"]), 1) / n)
        state = env.step(state, torch.tensor([[action]]))
    assert empty_steps >= 2  # the empty-F branch was exercised


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_masked_minimum_ignores_rows_outside_f_at_every_dtype(dtype: torch.dtype) -> None:
    """The minimum over F equals a masked fill's, bit for bit, where the overall minimum lies
    outside F, with large values of either sign, and 0 on an empty F (half precision too,
    where a fixed penalty of 1e30 would overflow to inf and give nan)."""
    rows = torch.tensor(
        [[[-5.0, 0.25, -0.5, 3.0], [2.0, -1.0, 100.0, 7.5], [1.0, -2.0, 0.0, 4.0]]], dtype=dtype
    )
    feasible = torch.tensor(
        [[[False, True, True, False], [True, False, True, True], [False, False, False, False]]]
    )
    weight, count, _ = feasible_weight(feasible, dtype, num_customers=4)
    got = masked_minima(rows, weight, count)
    want = rows.masked_fill(~feasible, float("inf")).amin(-1)
    want = torch.where(count.squeeze(-1) > 0, want, torch.zeros_like(want))
    assert torch.equal(got, want)
    assert got.tolist() == [[-0.5, 2.0, 0.0]]


def test_centred_mlp_rows_centre_every_column_and_zero_the_depot() -> None:
    """centered_mlp: all six columns (angle included) centred over F, depot row 0; naive_mlp
    and raw_linear: the raw table."""
    case = load_golden("cvrptw_env_golden.json")["cases"][0]
    env = CVRPTWEnv(instance_from_golden(case), num_rollouts=1)
    state = env.reset()
    table = env.consequences(state)
    feasible = feasible_customers(state.mask, has_depot=True)[0, 0]
    assert int(feasible.sum()) >= 2
    rows = table[0, 0]
    mean = rows[feasible].mean(0)
    centred = CandidateScorer(preset_configs("centered_mlp")[0])
    phi, _ = centred.centred_features(table, state.mask, has_depot=True)
    assert phi[0, 0, 0].abs().max().item() == 0.0
    torch.testing.assert_close(phi[0, 0, 1:], rows[1:] - mean, atol=1e-6, rtol=0)
    assert phi[0, 0, 1:][feasible[1:]].mean(0).abs().max().item() < 1e-6
    for raw in ("naive_mlp", "raw_linear"):
        phi, _ = CandidateScorer(preset_configs(raw)[0]).centred_features(
            table, state.mask, has_depot=True
        )
        assert torch.equal(phi[0, 0], rows)


# ---------------------------------------------------------------------------------------------
# 3. common-translation probe
# ---------------------------------------------------------------------------------------------
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


def draw_actions(log_probs: Tensor, generator: torch.Generator) -> Tensor:
    """One inverse-CDF draw per rollout with float64 uniforms from ``generator``."""
    uniforms = torch.rand(log_probs.shape[:-1], generator=generator, dtype=torch.float64)
    return sample_with_uniforms(log_probs, uniforms)


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


# ---------------------------------------------------------------------------------------------
# 4. permutation equivariance
# ---------------------------------------------------------------------------------------------
SCORER_KINDS = {
    "baseline": "baseline",
    "linc partial": "full_linc",
    "linc full_mean": "full_mu_summary",
    "linc none": "no_step_summary",
    "linc raw": "raw_linear",
    "mlp raw": "naive_mlp",
    "mlp centred": "centered_mlp",
}


def permute_nodes(instance: Instance, perm: Tensor) -> Instance:
    """Node i of the result is node ``perm[b, i]`` of ``instance`` (``perm``: ``[B, N]``)."""

    def take(t: Tensor) -> Tensor:
        index = perm.view(*perm.shape, *([1] * (t.dim() - 2))).expand_as(t)
        return t.gather(1, index)

    return dataclasses.replace(
        instance,
        locs=take(instance.locs),
        demand=take(instance.demand),
        time_windows=take(instance.time_windows),
        service_time=take(instance.service_time),
    )


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("kind", list(SCORER_KINDS))
def test_permuting_customers_permutes_scores(kind: str, problem: str) -> None:
    """u and log-probs of the permuted instance are the permuted ones, at every step of a
    rollout replayed with the permuted actions (node 0, depot or TSP start city, fixed)."""
    batch, k, size = 2, 3, 9
    policy = tiny_policy(SCORER_KINDS[kind], problem, seed=1, dtype=torch.float64)
    instance = make_instances(problem, batch, size, seed=7)
    n = instance.num_nodes
    generator = torch.Generator().manual_seed(3)
    perm = torch.stack(
        [
            torch.cat(
                [torch.zeros(1, dtype=torch.long), 1 + torch.randperm(n - 1, generator=generator)]
            )
            for _ in range(batch)
        ]
    )
    assert not torch.equal(perm, torch.arange(n).expand(batch, n))
    inverse = perm.argsort(-1)
    permuted = permute_nodes(instance, perm)
    z, starts = rollout_inputs(policy, batch, k, seed=4)

    actions: list[Tensor] = []

    def record(_step: int, _log_probs: Tensor, mask: Tensor) -> Tensor:
        actions.append(random_feasible_actions(mask, generator))
        return actions[-1]

    def replay(step: int, _log_probs: Tensor, _mask: Tensor) -> Tensor:
        return inverse.gather(1, actions[step])

    with torch.no_grad():
        original = drive(policy, instance, k, z, starts, record)
        mirrored = drive(policy, permuted, k, z, starts, replay)
    assert len(original) == len(mirrored) >= size - (problem == "tsp")
    index = perm.unsqueeze(1).expand(batch, k, n)
    for (u, log_probs, mask), (u_p, log_probs_p, mask_p) in zip(original, mirrored, strict=True):
        assert torch.equal(mask.gather(-1, index), mask_p)
        torch.testing.assert_close(u.gather(-1, index), u_p, atol=1e-9, rtol=1e-9)
        torch.testing.assert_close(log_probs.gather(-1, index), log_probs_p, atol=1e-9, rtol=0)


# ---------------------------------------------------------------------------------------------
# 5. masked actions have probability exactly 0
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_masked_actions_have_zero_probability(preset: str, problem: str) -> None:
    batch, k = 2, 4
    policy = tiny_policy(preset, problem, seed=2)
    instance = make_instances(problem, batch, 8, seed=11).to(dtype=torch.float32)
    z, starts = rollout_inputs(policy, batch, k, seed=5)
    generator = torch.Generator().manual_seed(6)

    def sample(_step: int, log_probs: Tensor, mask: Tensor) -> Tensor:
        probs = log_probs.exp()
        assert bool((probs[~mask] == 0).all())
        assert bool(torch.isfinite(log_probs[mask]).all())
        torch.testing.assert_close(probs.sum(-1), torch.ones_like(probs[..., 0]))
        action = draw_actions(log_probs, generator)
        assert bool(mask.gather(-1, action.unsqueeze(-1)).all())
        return action

    with torch.no_grad():
        steps = drive(policy, instance, k, z, starts, sample)
    assert len(steps) >= 8 - (starts is not None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_log_probs_equal_a_masked_fill_in_value_and_gradient(dtype: torch.dtype) -> None:
    """The additive 0 / -inf mask gives the masked fill's log-probabilities bit for bit, and
    the same gradient (0 on masked scores, no nan), at every dtype's extreme scores."""
    policy = tiny_policy("full_linc", "cvrptw", seed=0)
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 3, 7, generator=generator, dtype=torch.float64) * 40
    scores[0, 0, 1] = torch.finfo(dtype).max
    scores[0, 0, 2] = torch.finfo(dtype).min
    scores = scores.to(dtype).requires_grad_()
    mask = torch.rand(2, 3, 7, generator=generator) > 0.5
    mask[..., 3] = True  # every row keeps a feasible action
    mask[1, 2] = False
    mask[1, 2, 6] = True  # a row with one feasible action (log-probability 0)
    got = policy.log_probs(scores, mask)
    clip, scale = policy.config.logit_clip, policy.score_scale
    reference = torch.sigmoid(scores * (2.0 * scale)) * (2.0 * clip)
    want = reference.masked_fill(~mask, float("-inf")).log_softmax(-1)
    assert torch.equal(got, want)
    assert mask_offsets(mask, dtype).tolist() == torch.where(mask, 0.0, -math.inf).tolist()
    chosen = mask.to(torch.uint8).argmax(-1, keepdim=True)
    weight = torch.linspace(-1, 1, 6).view(2, 3, 1).to(dtype)
    (grad_got,) = torch.autograd.grad((got.gather(-1, chosen) * weight).sum(), scores)
    (grad_want,) = torch.autograd.grad((want.gather(-1, chosen) * weight).sum(), scores)
    assert torch.equal(grad_got, grad_want)
    assert bool((grad_got[~mask] == 0).all()) and bool(torch.isfinite(grad_got).all())


def test_sampler_never_draws_a_zero_probability_action() -> None:
    """Many draws over rows with masked entries first, last and in between."""
    generator = torch.Generator().manual_seed(0)
    mask = torch.rand(64, 32, 7, generator=generator) < 0.5
    mask[..., 3] = True
    mask[0, 0] = torch.tensor([False, False, False, True, False, False, False])
    logits = torch.randn(64, 32, 7, generator=generator) * 5
    log_probs = logits.masked_fill(~mask, -math.inf).log_softmax(-1)
    for _ in range(20):
        action = draw_actions(log_probs, generator)
        assert bool(mask.gather(-1, action.unsqueeze(-1)).all())
    assert bool((action[0, 0] == 3).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sampler_extreme_uniforms_never_draw_a_masked_action(dtype: torch.dtype) -> None:
    """u = 0 and the largest u below 1: masked entries at both ends are still skipped."""
    mask = torch.tensor([[[False, True, False, True, False]], [[False, False, True, True, True]]])
    logits = torch.tensor([[[0.0, 1.0, 2.0, -1.0, 3.0]], [[5.0, 4.0, -9.0, 0.0, -3.0]]])
    log_probs = logits.to(dtype).masked_fill(~mask, -math.inf).log_softmax(-1)
    largest_below_one = 1.0 - torch.finfo(dtype).eps / 2
    for u, expected in ((0.0, [[1], [2]]), (largest_below_one, [[3], [4]])):
        action = sample_with_uniforms(log_probs, torch.full((2, 1), u, dtype=dtype))
        assert action.tolist() == expected, u


# ---------------------------------------------------------------------------------------------
# 6. presets: exactly the fields of reference section 5, and each one runs
# ---------------------------------------------------------------------------------------------
# Fields in which each preset's (ModelConfig, TrainConfig) differ from full_linc's (CVRPTW).
EXPECTED_DIFFERENCES: dict[str, tuple[dict, dict]] = {
    "baseline": (
        {"scorer": "baseline", "gated_attention": False, "depth_mixer": False},
        {"advantage": "group_mean", "rollout_mask": "dense", "best_only_start_ratio": 0.0},
    ),
    "full_linc": ({}, {}),
    "no_local": ({"scorer": "baseline"}, {}),
    "naive_mlp": ({"scorer": "mlp", "centring": "none", "summary": "none"}, {}),
    "no_gateattn": ({"gated_attention": False}, {}),
    "no_depth_mixer": ({"depth_mixer": False}, {}),
    "no_soft_top1": ({}, {"advantage": "group_mean", "best_only_start_ratio": 0.0}),
    "group_mean": (
        {},
        {"advantage": "group_mean", "rollout_mask": "dense", "best_only_start_ratio": 0.0},
    ),
    "centered_mlp": (
        {
            "scorer": "mlp",
            "centred_features": ("travel", "wait", "slack", "arrival", "departure", "angle"),
            "depot_row": "zero",
            "summary": "none",
        },
        {},
    ),
    "raw_linear": ({"centring": "none"}, {}),
    "no_step_summary": ({"summary": "none"}, {}),
    "full_mu_summary": ({"summary": "full_mean"}, {}),
    "polynet": (
        {
            "scorer": "baseline",
            "gated_attention": False,
            "depth_mixer": False,
            "node_static_features": (),
            "input_scale": "horizon",
        },
        {"advantage": "group_mean", "normalise_advantage": False, "best_only_start_ratio": 0.0},
    ),
    "pomo": (
        {
            "scorer": "baseline",
            "gated_attention": False,
            "depth_mixer": False,
            "node_static_features": (),
            "input_scale": "horizon",
            "z_dim": 0,
        },
        {
            "advantage": "group_mean",
            "normalise_advantage": False,
            "rollout_mask": "dense",
            "best_only_start_ratio": 0.0,
            "multi_start": True,
        },
    ),
}


def test_preset_names_and_order() -> None:
    """The ablation list is the paper's table: the first twelve presets, in their order."""
    assert len(ABLATION_VARIANTS) == 12 and tuple(PRESETS)[:12] == ABLATION_VARIANTS
    assert ABLATION_VARIANTS[:2] == ("baseline", "full_linc")
    assert ABLATION_VARIANTS[-1] == "full_mu_summary"
    assert set(PRESETS) == set(EXPECTED_DIFFERENCES) == {*ABLATION_VARIANTS, "polynet", "pomo"}


def test_full_linc_is_the_reference_cvrptw_model() -> None:
    """Reference sections 3 and 4: the common settings every variant is measured against."""
    model, train = preset_configs("full_linc")
    assert (model.embedding_dim, model.encoder_layers, model.num_heads) == (128, 6, 8)
    assert (model.ff_hidden_dim, model.z_dim, model.poly_hidden_dim) == (512, 16, 256)
    assert model.logit_clip == 10.0 and model.input_scale == "grid"
    assert model.candidate_features == CONSEQUENCE_FEATURES["cvrptw"]
    assert model.effective_centred == ("travel", "wait", "slack", "arrival", "departure")
    assert model.node_static_features == ("knn_nearest", "knn_mean", "knn_min")
    assert model.gated_attention and model.gate_mode == "centered_sigmoid"
    assert model.gate_init_bias == 2.0 and model.depth_mixer
    assert (model.scorer, model.summary, model.depot_row) == ("linc", "partial", "centred")
    assert model.scorer_hidden_dim == 128 and model.phi_bias
    assert model.summary_stats == (("mean", "travel"), ("mean", "wait"), ("min", "slack"))
    assert (train.advantage, train.rollout_mask) == ("soft_top1", "best_only")
    assert train.best_only_start_ratio == 0.25 and train.normalise_advantage
    assert (train.tau_start, train.tau_end) == (4.0, 0.25)
    assert train.tau_anneal_ratio == pytest.approx(1 / 300)
    assert (train.num_rollouts, train.batch_size, train.instances_per_epoch) == (128, 128, 6400)
    assert (train.learning_rate, train.weight_decay, train.max_grad_norm) == (1e-4, 1e-6, 0.0)
    assert not train.multi_start


@pytest.mark.parametrize("preset", list(EXPECTED_DIFFERENCES))
def test_preset_differs_from_full_linc_in_exactly_the_listed_fields(preset: str) -> None:
    base_model, base_train = preset_configs("full_linc")
    model, train = preset_configs(preset)
    want_model, want_train = EXPECTED_DIFFERENCES[preset]
    assert {key: b for key, (_, b) in config_differences(base_model, model).items()} == want_model
    assert {key: b for key, (_, b) in config_differences(base_train, train).items()} == want_train
    # On CVRP and TSP the same overrides apply to that problem's LINC model (which already
    # has no GateAttn or Depth Mixer); feature lists become the problem's own.
    for problem in ("cvrp", "tsp"):
        other_base, other_base_train = preset_configs("full_linc", problem)
        other, other_train = preset_configs(preset, problem)
        overrides = dict(want_model)
        if "centred_features" in overrides:
            overrides["centred_features"] = CONSEQUENCE_FEATURES[problem]
        expected = {k: v for k, v in overrides.items() if getattr(other_base, k) != v}
        got = {key: b for key, (_, b) in config_differences(other_base, other).items()}
        assert got == expected, problem
        assert config_differences(other_base_train, other_train) == config_differences(
            base_train, train
        )


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_builds_and_rolls_out(preset: str, problem: str) -> None:
    """Tiny instances (n = 6, K = 4): every rollout visits each customer exactly once, its cost
    is the verified length of its routes, and its log-likelihood is the sum of the step
    log-probabilities of its actions, replayed decision by decision."""
    batch, k, size = 2, 4, 6
    policy = tiny_policy(preset, problem, seed=3)
    instance = make_instances(problem, batch, size, seed=21).to(dtype=torch.float32)
    z, starts = rollout_inputs(policy, batch, k, seed=8)
    if problem == "tsp" and policy.config.z_dim > 0:
        starts = None  # the default: every tour starts at city 0
    with torch.no_grad():
        result = policy.rollout(instance, k, z=z, starts=starts, sample_seeds=row_seeds(1, batch))
    assert result.actions.shape[:2] == (batch, k)
    customers = range(1, size + 1) if problem != "tsp" else range(size)
    for row in result.actions.flatten(0, 1).tolist():
        visited = [node for node in row if node != 0] if problem != "tsp" else row[:size]
        assert sorted(visited) == list(customers)
    for b in range(batch):
        for j in range(k):
            solution = actions_to_solution(result.actions[b, j], problem, instance.num_nodes)
            checked = verify_instance(instance, b, solution, convention="exact")
            assert float(result.cost[b, j]) == pytest.approx(checked.cost, rel=1e-5)
    if starts is not None and problem != "tsp":
        assert torch.equal(result.actions[..., 0], starts)

    forced = starts
    if problem == "tsp" and starts is None:
        forced = torch.zeros(batch, k, dtype=torch.long)
    prefix = 0 if forced is None else 1  # a forced first move is not a decision
    decisions = result.actions[..., prefix:]  # [B, K, T]
    with torch.no_grad():
        records = drive(policy, instance, k, z, forced, lambda t, _lp, _mask: decisions[..., t])
    assert len(records) == decisions.shape[-1]
    replayed = sum(
        log_probs.gather(-1, decisions[..., t, None]).squeeze(-1)
        for t, (_, log_probs, _) in enumerate(records)
    )
    torch.testing.assert_close(result.log_likelihood, replayed, rtol=1e-5, atol=1e-5)


def test_z_is_required_when_the_model_has_z() -> None:
    policy = tiny_policy("full_linc", "cvrptw")
    instance = make_instances("cvrptw", 1, 5, seed=0).to(dtype=torch.float32)
    with pytest.raises(ValueError, match="z vectors"):
        policy.rollout(instance, 2, decoding="greedy")
    with pytest.raises(ValueError, match="needs sample_seeds"):
        policy.rollout(instance, 2, z=sample_z(row_seeds(0, 1), 2, 16))
    with pytest.raises(ValueError, match="model is for cvrptw"):
        policy.rollout(make_instances("tsp", 1, 5, seed=0).to(dtype=torch.float32), 2)


# ---------------------------------------------------------------------------------------------
# 7. configuration validation
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"candidate_features": ("travel", "speed")}, "candidate_features"),
        ({"centred_features": ("travel", "load_after")}, "centred_features"),
        ({"node_static_features": ("knn_max",)}, "node_static_features"),
        ({"scorer": "mlp", "summary": "partial"}, "summary"),
        ({"scorer": "mlp", "summary": "full_mean"}, "summary"),
        ({"scorer": "attention"}, "scorer"),
        ({"centring": "median"}, "centring"),
        ({"depot_row": "mean"}, "depot_row"),
        ({"summary": "full"}, "summary"),
        ({"input_scale": "unit"}, "input_scale"),
        ({"gate_mode": "tanh"}, "gate_mode"),
        ({"static_feature_mode": "add"}, "static_feature_mode"),
        ({"problem": "vrptw"}, "problem"),
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"knn_k": 0}, "knn_k"),
        ({"z_dim": -1}, "z_dim"),
        ({"scorer": "linc", "candidate_features": ()}, "candidate_features"),
    ],
)
def test_model_config_rejects_bad_values_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ModelConfig(**overrides)


def test_feature_names_are_checked_against_the_problem() -> None:
    with pytest.raises(ValueError, match=r"candidate_features: expected a cvrp feature .*'wait'"):
        ModelConfig.for_problem("cvrp", candidate_features=("travel", "wait"))
    with pytest.raises(ValueError, match=r"centred_features: expected a tsp feature .*'slack'"):
        ModelConfig.for_problem("tsp", centred_features=("travel", "slack"))
    # The problems' defaults are valid and the mlp scorer without a summary is accepted.
    for problem in PROBLEMS:
        ModelConfig.for_problem(problem)
        ModelConfig.for_problem(problem, scorer="mlp", summary="none")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"advantage": "top1"}, "advantage"),
        ({"rollout_mask": "sparse"}, "rollout_mask"),
        ({"num_rollouts": 0}, "num_rollouts"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"tau_start": 0.1, "tau_end": 0.2}, "tau"),
        ({"num_rollouts": 1}, "num_rollouts"),
        ({"device": "tpu"}, "device"),
        ({"init": "xavier"}, "init"),
    ],
)
def test_train_config_rejects_bad_values_naming_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**overrides)


def test_unknown_preset_and_unknown_keys_are_named() -> None:
    with pytest.raises(ConfigError, match=r"model.variant: expected one of \[.*\], got 'full_lnc'"):
        preset_configs("full_lnc")
    with pytest.raises(ConfigError, match=r"model: unknown key\(s\) \['embeding_dim'\]"):
        build(ModelConfig, {"embeding_dim": 64}, "model")
    rebuilt = build(ModelConfig, dataclasses.asdict(preset_configs("centered_mlp")[0]), "model")
    assert rebuilt == preset_configs("centered_mlp")[0]


@pytest.mark.parametrize(
    ("cls", "values", "message"),
    [
        # the allowed values come from the Literal annotation
        (
            ModelConfig,
            {"scorer": "attention"},
            "model.scorer: expected one of ('baseline', 'linc', 'mlp'), got 'attention'",
        ),
        (
            TrainConfig,
            {"init": "xavier"},
            "train.init: expected one of ('linc', 'reference'), got 'xavier'",
        ),
        (TrainConfig, {"epochs": "ten"}, "train.epochs: expected int, got 'ten'"),
        (
            TrainConfig,
            {"precision": "half"},
            "train.precision: expected one of ('auto', 'fp32', 'bf16', 'fp16'), got 'half'",
        ),
        (
            TrainConfig,
            {"precision": "fp16"},
            "train.precision: expected fp32, bf16 or auto on device cpu (fp16 needs CUDA), "
            "got 'fp16'",
        ),
        (TrainConfig, {"epochs": 2.5}, "train.epochs: expected int, got 2.5"),
        (
            ModelConfig,
            {"candidate_features": "travel"},
            "model.candidate_features: expected a list of str, got 'travel'",
        ),
        (TrainConfig, {"learning_rate": -0.5}, "train.learning_rate: expected > 0, got -0.5"),
    ],
)
def test_builder_names_section_key_and_value(cls: type, values: dict, message: str) -> None:
    section = "model" if cls is ModelConfig else "train"
    with pytest.raises(ConfigError) as err:
        build(cls, values, section)
    assert str(err.value) == message


def test_builder_converts_yaml_lists_and_integers() -> None:
    model = build(ModelConfig, {"candidate_features": ["travel", "angle"]}, "model")
    assert model.candidate_features == ("travel", "angle")
    train = build(TrainConfig, {"tau_start": 100, "tau_end": 1}, "train")
    assert (train.tau_start, type(train.tau_start)) == (100.0, float)
    assert literal_values(TrainConfig, "advantage") == ("group_mean", "soft_top1")


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
