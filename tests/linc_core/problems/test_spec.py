"""The problem registry: every built-in problem's spec, what a spec refuses, registering."""

from __future__ import annotations

import dataclasses

import pytest

from linc_core.config import PARTIAL_SUMMARY, ModelConfig
from linc_core.model.decoder import CONTEXT_SCALARS
from linc_core.model.features import node_input_dim
from linc_core.problems import CONSEQUENCE_FEATURES, RELATIVE_FEATURES, make_env
from linc_core.problems.spec import (
    BUILTIN_PROBLEMS,
    problem_names,
    problem_spec,
    register_problem,
    unregister_problem,
)
from linc_core.train.data import generate
from linc_core.utils.typed import ConfigError, build


@pytest.mark.parametrize("name", BUILTIN_PROBLEMS)
def test_each_built_in_spec_agrees_with_its_environment_and_model(name: str) -> None:
    spec = problem_spec(name)
    instance = generate(name, 2, 10, seed=0)
    env = make_env(instance, 3)
    state = env.reset()
    assert instance.has_depot is spec.has_depot and env.feature_names == spec.consequence_features
    assert env.consequences(state).shape[-1] == len(CONSEQUENCE_FEATURES[name])
    assert set(RELATIVE_FEATURES[name]) == set(spec.consequence_features) - {"angle"}
    context = env.decoder_context(state)
    assert sum(x is not None for x in (context.load, context.elapsed)) == CONTEXT_SCALARS[name]
    assert (context.first is not None) is spec.first_node_query
    assert node_input_dim(ModelConfig.for_problem(name, node_static_features=())) == (
        2 + spec.node_feature_width
    )
    assert ModelConfig.for_problem(name).summary_stats == PARTIAL_SUMMARY[name]


def test_a_spec_refuses_what_no_consumer_could_read() -> None:
    spec = problem_spec("cvrp")
    with pytest.raises(ValueError, match="instance_fields must start with locs, grid_size"):
        dataclasses.replace(spec, name="x", instance_fields=("grid_size", "locs"))
    with pytest.raises(ValueError, match=r"summary names \['wait'\], not consequence"):
        dataclasses.replace(spec, name="x", summary=(("mean", "wait"),))
    with pytest.raises(ValueError, match="extra_fields"):
        dataclasses.replace(spec, name="x", extra_fields={"demand": 1})
    with pytest.raises(ValueError, match="node_features and node_feature_width go together"):
        dataclasses.replace(spec, name="x", node_feature_width=0)


def test_registering_a_problem_makes_its_name_known_and_forgetting_it_unknown() -> None:
    twin = dataclasses.replace(problem_spec("cvrp"), name="cvrp_twin")
    with pytest.raises(
        ValueError, match=r"unknown problem .cvrp_twin.*; known problems: cvrptw, cvrp, tsp$"
    ):
        problem_spec("cvrp_twin")
    with pytest.raises(ConfigError, match=r"^model\.problem: expected one of \("):
        build(ModelConfig, {"problem": "cvrp_twin"}, "model")
    register_problem(twin)
    try:
        assert problem_names()[-1] == "cvrp_twin" and register_problem(twin) is twin
        with pytest.raises(ValueError, match="registered already"):
            register_problem(dataclasses.replace(twin))
        assert ModelConfig.for_problem("cvrp_twin").scorer_hidden_dim == 64
    finally:
        unregister_problem("cvrp_twin")
    assert "cvrp_twin" not in problem_names()
    with pytest.raises(ValueError, match="built in"):
        unregister_problem("cvrp")
