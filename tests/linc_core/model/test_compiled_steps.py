"""The decoding step and the training step compile whole: 0 graph breaks, every preset and problem.

``torch._dynamo.explain`` traces a function as ``torch.compile`` would and lists every place
where dynamo had to split the graph (an ``out=`` write into a view, a host read of a tensor, a
branch on a tensor's value, an unsupported call). The three pure steps are traced at a state
in the middle of a rollout, where every rollout has its own mask, load and time:

- ``decide_all``: the choice rule's decision of every rollout (scores, log-probabilities,
  the keyed sampler or greedy, with and without score morphing), and ``decide_packed``: that of
  a packed selection of rollouts, selected and scattered back in the graph (the mask as
  floats), under ``no_grad``;
- ``env_transition``: the environment's step (each problem, CVRPTW with and without an
  unbounded window);
- ``chunk_log_likelihood``: the training replay's differentiable pass over packed decisions,
  under autograd.

Compiled and eager results are compared in ``test_compiled_results.py`` (under
``inference_mode`` too, where AOT autograd once failed: dynamo's trace is the same).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from linc_core.model import LincPolicy
from linc_core.model.decisions import PolicyChooser, decide_all, decide_packed, env_transition
from linc_core.model.replay import chunk_log_likelihood, pack_decisions
from linc_core.model.sampling import greedy, keyed_sampler, rollout_keys, row_seeds, sample_z
from linc_core.presets import PRESETS
from linc_core.problems import make_env, random_feasible_actions
from linc_core.problems.rollout import pomo_starts, start_rollouts
from linc_core.train.data import generate
from linc_core.utils.compiling import mask_values
from tests.conftest import tiny_configs

PROBLEMS = ("cvrptw", "cvrp", "tsp")
BATCH, ROLLOUTS, SIZE = 2, 4, 10


def graph_breaks(fn: Callable, *args) -> list[str]:
    """Every graph break dynamo meets tracing ``fn(*args)``: reason and user frame."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    assert explanation.graph_count >= 1, "nothing was traced"
    return [
        f"{reason.reason.splitlines()[0]} at {reason.user_stack[-1] if reason.user_stack else '?'}"
        for reason in explanation.break_reasons
    ]


def _same_model_as(preset: str, problem: str) -> str | None:
    """An earlier preset whose model is this one's (they differ in training settings only)."""
    model = tiny_configs(preset, problem)[0]
    for other in PRESETS:
        if other == preset:
            return None
        if tiny_configs(other, problem)[0] == model:
            return other
    return None


# Every distinct model once: a preset whose model equals an earlier one's (training settings
# differ only) is traced with that one.
MODELS = [
    pytest.param(preset, problem, id=f"{preset}-{problem}")
    for problem in PROBLEMS
    for preset in PRESETS
    if _same_model_as(preset, problem) is None
]


def _policy(preset: str, problem: str) -> LincPolicy:
    model, _ = tiny_configs(preset, problem)
    torch.manual_seed(0)
    return LincPolicy(model).eval()


def _mid_rollout(policy: LincPolicy, problem: str, steps: int = 4):
    """(env, encoded batch, z, a state ``steps`` random decisions into the rollouts)."""
    instance = generate(problem, BATCH, SIZE, seed=3)
    env = make_env(instance, ROLLOUTS)
    z = None
    if policy.config.z_dim > 0:
        z = sample_z(row_seeds(1, BATCH), ROLLOUTS, policy.config.z_dim)
    starts = pomo_starts(instance, ROLLOUTS) if policy.config.z_dim == 0 else None
    state, _ = start_rollouts(env, starts)
    generator = torch.Generator().manual_seed(5)
    trajectory = []
    for _ in range(steps):
        action = random_feasible_actions(state.mask, generator)
        trajectory.append((state, action))
        state = env.step(state, action)
    return env, z, state, trajectory


@pytest.mark.parametrize(("preset", "problem"), MODELS)
def test_the_decision_step_compiles_whole(preset: str, problem: str) -> None:
    policy = _policy(preset, problem)
    env, z, state, _ = _mid_rollout(policy, problem)
    with torch.no_grad():
        encoded = policy.encode(env.instance)
        pick = keyed_sampler(rollout_keys(row_seeds(2, BATCH), 0, ROLLOUTS))
        chooser = PolicyChooser(policy, env, encoded, z, pick, compiled=True)
        assert graph_breaks(decide_all, chooser, state, torch.tensor(4)) == []
        # a packed decision: some rollouts of each instance, their selection in the graph
        positions = torch.tensor([[3, 1], [0, 2]])
        mask = mask_values(state.mask)
        step = torch.tensor(4)
        assert graph_breaks(decide_packed, chooser, state, step, mask, positions) == []
        if preset == "full_linc":  # greedy, and score morphing
            chooser = PolicyChooser(policy, env, encoded, z, greedy, compiled=True)
            assert graph_breaks(decide_all, chooser, state, torch.tensor(4)) == []
            frozen = _policy(preset, problem)
            morphing = PolicyChooser(policy, env, encoded, z, pick, morph=(frozen, 0.5))
            assert graph_breaks(decide_all, morphing, state, torch.tensor(4)) == []
            assert graph_breaks(decide_packed, morphing, state, step, mask, positions) == []


# a customer without a due time: CVRPTW only (the others have no time windows)
@pytest.mark.parametrize(
    ("problem", "unbounded"), [(problem, False) for problem in PROBLEMS] + [("cvrptw", True)]
)
def test_the_environment_step_compiles_whole(problem: str, unbounded: bool) -> None:
    instance = generate(problem, BATCH, SIZE, seed=3)
    if unbounded:  # a customer without a due time: the table's infinite slack is zeroed
        windows = instance.time_windows.clone()
        windows[0, 3, 1] = float("inf")
        instance = dataclasses.replace(instance, time_windows=windows)
    env = make_env(instance, ROLLOUTS)
    assert env.unbounded_windows is unbounded if problem == "cvrptw" else True
    state, _ = start_rollouts(env)
    action = random_feasible_actions(state.mask, torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert graph_breaks(env_transition, env, state, action) == []


@pytest.mark.parametrize(("preset", "problem"), MODELS)
def test_the_training_replay_compiles_whole(preset: str, problem: str) -> None:
    policy = _policy(preset, problem)
    env, z, _, steps = _mid_rollout(policy, problem)
    encoded = policy.encode(env.instance)
    trajectory = policy_trajectory(policy, env, encoded, z, steps)
    weight = torch.linspace(-1.0, 1.0, BATCH * ROLLOUTS).view(BATCH, ROLLOUTS)
    decisions = pack_decisions(trajectory, weight)
    assert decisions is not None
    morph = None
    if decisions.morph_base_scores is not None:
        morph = (decisions.morph_base_scores, trajectory.morph_lambda)
    args = (
        policy,
        env,
        trajectory.time_scale,
        encoded.cache,
        decisions.state,
        decisions.action,
        decisions.weight,
        decisions.z,
        morph,
    )
    assert graph_breaks(chunk_log_likelihood, *args) == []
    # as a compiled replay calls it: the mask read as floats
    assert graph_breaks(chunk_log_likelihood, *args, mask_values(decisions.state.mask)) == []


def policy_trajectory(policy, env, encoded, z, steps):
    """A ``Trajectory`` of the recorded ``(state, action)`` steps, as a rollout keeps it."""
    chooser = PolicyChooser(policy, env, encoded, z, greedy, keep_trajectory=True)
    trajectory = chooser.trajectory
    for state, action in steps:
        trajectory.states.append(state)
        trajectory.actions.append(action)
    return trajectory


def test_the_steps_compile_whole_under_bf16_autocast() -> None:
    """``train.precision=bf16`` with ``train.compile``: the float32 attention on CPU
    (``linc_core.model.encoder.attention``, autocast switched off around it) keeps one graph."""
    policy = _policy("full_linc", "cvrptw")
    env, z, state, steps = _mid_rollout(policy, "cvrptw")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with torch.no_grad():
            encoded = policy.encode(env.instance)
            pick = keyed_sampler(rollout_keys(row_seeds(2, BATCH), 0, ROLLOUTS))
            chooser = PolicyChooser(policy, env, encoded, z, pick, compiled=True)
            assert graph_breaks(decide_all, chooser, state, torch.tensor(4)) == []
        encoded = policy.encode(env.instance)
        trajectory = policy_trajectory(policy, env, encoded, z, steps)
        weight = torch.linspace(-1.0, 1.0, BATCH * ROLLOUTS).view(BATCH, ROLLOUTS)
        decisions = pack_decisions(trajectory, weight)
        assert encoded.cache.keys.dtype == torch.bfloat16  # the half cache the glimpse reads
        args = (policy, env, trajectory.time_scale, encoded.cache, decisions.state,
                decisions.action, decisions.weight, decisions.z, None)  # fmt: skip
        assert graph_breaks(chunk_log_likelihood, *args) == []
