"""Presets as data: a checkpoint's configs name their variant (``variant_of``), and a variant
registered from outside is checked before it is usable."""

from __future__ import annotations

import dataclasses

import pytest

from linc_core.presets import PRESETS, Preset, preset_configs, register_preset, variant_of
from linc_core.utils.typed import ConfigError


@pytest.mark.parametrize("problem", ["cvrptw", "cvrp", "tsp"])
@pytest.mark.parametrize("name", list(PRESETS))
def test_a_variants_configs_name_it_whatever_their_sizes(name: str, problem: str) -> None:
    model, train = preset_configs(name, problem)
    # sizes and budgets are not switches: a small CPU run of a variant is still that variant
    model = dataclasses.replace(model, embedding_dim=32, encoder_layers=1, ff_hidden_dim=64)
    train = dataclasses.replace(train, epochs=3, batch_size=8, learning_rate=3e-4)
    found = variant_of(model, train)
    assert found is not None
    if problem != "cvrptw" and name in ("no_gateattn", "no_depth_mixer"):
        # CVRP's and TSP's LINC has neither: these coincide with full_linc, which names them
        assert found.name == "full_linc"
    else:
        assert found.name == name


def test_configs_of_no_variant_name_none() -> None:
    model, train = preset_configs("full_linc", "cvrptw")
    assert (
        variant_of(dataclasses.replace(model, summary="full_mean", centring="none"), train) is None
    )
    assert variant_of(model, dataclasses.replace(train, advantage="group_mean")) is None


def test_a_registered_variant_is_checked_and_then_named(monkeypatch) -> None:
    monkeypatch.setattr("linc_core.presets.PRESETS", dict(PRESETS))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['scorr'\]"):
        register_preset(Preset("typo", "typo", model={"scorr": "linc"}))
    with pytest.raises(ConfigError, match="model.candidate_features"):
        register_preset(Preset("bad", "bad", model={"candidate_features": ("nope",)}))
    with pytest.raises(ConfigError, match="name is taken"):
        register_preset(Preset("full_linc", "another", model={"summary": "none"}))
    no_angle = {"candidate_features": ("travel", "wait", "slack", "arrival", "departure")}
    register_preset(Preset("no_angle", "w/o angle", model=no_angle))
    model, train = preset_configs("no_angle", "cvrptw")
    assert model.candidate_features == no_angle["candidate_features"]
    assert variant_of(model, train).label == "w/o angle"
