"""A problem linc does not ship, registered through its spec alone: CVRP with a route-length
limit (:mod:`examples.route_limit`, one module: env, generator, data check,
verifier rule, PyVRP fleet, spec). Nothing in linc_core names it; every part reads it from the
registry: configs, the model, ``fit``, ``decode``, the verifier, Parquet, PyVRP."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from examples.route_limit import LIMIT, NAME, ROUTE_LIMIT
from linc_core import DecodeConfig, GeneratedData, LincPolicy, decode, fit, verify_instance
from linc_core.config import ModelConfig
from linc_core.evaluate.pyvrp_solver import solve_with_pyvrp
from linc_core.instances import Instance, InstanceError, validate_instance
from linc_core.instances.parquet import instance_to_table, table_to_instance
from linc_core.metrics import VALIDATION_COST
from linc_core.problems import (
    CONSEQUENCE_FEATURES,
    actions_to_routes,
    complete_rollouts,
    make_env,
    problem_names,
    random_feasible_actions,
    register_problem,
    unregister_problem,
)
from linc_core.train.data import generate
from linc_core.utils.typed import ConfigError, build
from linc_core.verify import convention_for
from tests.conftest import tiny_configs

CUSTOMERS = 10


@pytest.fixture(scope="module", autouse=True)
def registered():
    register_problem(ROUTE_LIMIT)
    yield ROUTE_LIMIT
    unregister_problem(NAME)


def route_lengths(instance: Instance, row: int, routes: list[list[int]]) -> list[float]:
    locs = instance.locs[row].double()
    return [float((locs[[0, *r]] - locs[[*r, 0]]).norm(dim=-1).sum()) for r in routes if r]


def test_the_registry_reads_the_spec_everywhere() -> None:
    assert NAME in problem_names()
    assert CONSEQUENCE_FEATURES[NAME][-1] == "route_slack"
    assert convention_for(NAME) == "exact"
    model = ModelConfig.for_problem(NAME)
    assert model.summary_stats[-1] == ("min", "route_slack")
    assert build(ModelConfig, dataclasses.asdict(model), "model") == model  # one name type
    with pytest.raises(ConfigError, match=r"model\.problem: expected one of \("):
        build(ModelConfig, {"problem": "cvrp_route_limits"}, "model")
    instance = generate(NAME, 3, CUSTOMERS, seed=4)
    back = table_to_instance(instance_to_table(instance))  # its extra field is a column
    assert back.problem == NAME and torch.equal(back.extras[LIMIT], instance.extras[LIMIT])
    assert torch.equal(instance.select([2, 0]).extras[LIMIT], instance.extras[LIMIT][[2, 0]])
    with pytest.raises(ValueError, match="holds \\['max_route_length'\\], got \\[\\]"):
        dataclasses.replace(instance, extras={})
    far = dataclasses.replace(instance, extras={LIMIT: instance.extras[LIMIT] / 3})
    with pytest.raises(InstanceError, match="max_route_length.*there and back"):
        validate_instance(far, "far.vrp")


def test_the_mask_keeps_every_route_within_the_limit_and_the_verifier_checks_it() -> None:
    instance = generate(NAME, 4, CUSTOMERS, seed=1)
    env = make_env(instance, num_rollouts=16)
    generator = torch.Generator().manual_seed(0)
    _, actions = complete_rollouts(env, lambda s, _: random_feasible_actions(s.mask, generator))
    binding = 0
    for row in range(instance.batch_size):
        limit = float(instance.extras[LIMIT][row])
        for k in range(16):
            solution = actions_to_routes(actions[row, k])
            result = verify_instance(instance, row, solution)  # the spec's rule
            assert result.feasible, result.violations
            lengths = route_lengths(instance, row, solution)
            assert max(lengths) <= limit + 1e-5
            binding += max(lengths) > 0.9 * limit
        one_route = [list(range(1, CUSTOMERS + 1))]
        assert "route_length" in verify_instance(instance, row, one_route).kinds()
    assert binding > 0  # some routes run close to the limit: it binds


def test_it_trains_decodes_and_verifies() -> None:
    model_config, train_config = tiny_configs("full_linc", NAME, batch_size=8)
    train_config = dataclasses.replace(
        train_config, num_rollouts=8, instances_per_epoch=16, epochs=3, validation_size=0
    )
    torch.manual_seed(0)
    policy = LincPolicy(model_config)
    data = GeneratedData.for_training(NAME, CUSTOMERS, train_config, seed=1)
    validation = generate(NAME, 4, CUSTOMERS, seed=99)
    result = fit(policy, train_config, data, validation=validation)
    assert result.epochs_done == 3 and len(result.history) == 3
    assert all(torch.isfinite(torch.tensor(h[VALIDATION_COST])) for h in result.history)

    tests = generate(NAME, 3, CUSTOMERS, seed=7)
    decoded = decode(result.policy, tests, DecodeConfig(method="sampling", num_z=8, augment=8))
    for row, solution in enumerate(decoded.routes):
        checked = verify_instance(tests, row, solution)
        assert checked.feasible, checked.violations
        assert checked.cost == pytest.approx(float(decoded.cost[row]), rel=1e-9)
        assert max(route_lengths(tests, row, solution)) <= float(tests.extras[LIMIT][row]) + 1e-5


def test_pyvrp_solves_it_within_the_limit() -> None:
    instance = generate(NAME, 1, CUSTOMERS, seed=3)
    solved = solve_with_pyvrp(instance, 0, seconds=0.2)
    assert solved.feasible, solved.verify.violations
    assert max(route_lengths(instance, 0, solved.routes)) <= float(instance.extras[LIMIT][0])
