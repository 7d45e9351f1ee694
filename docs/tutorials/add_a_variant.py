# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Add an ablation variant
#
# In linc a variant is data: a `Preset` is a name, a label for the tables, and the switches
# (fields of `ModelConfig` and `TrainConfig`) in which it differs from the paper's full model.
# Model and training code read fields, never variant names, so a new variant needs no code.
#
# This notebook adds *w/o angle*: LINC without its one absolute consequence feature (the angle
# of each candidate about the depot), checks exactly how it differs from `full_linc`, trains
# both on the same batches and compares them. It runs in about a minute.

# %%
import dataclasses

import linc_core as lc
from linc_core.config import config_differences

# %% [markdown]
# ## Define and register it
#
# `register_preset` checks the switches against the configs (an unknown key or a feature the
# problem does not have is refused, naming it) before the variant becomes usable by name.

# %%
no_angle = lc.register_preset(
    lc.Preset(
        "no_angle",
        "w/o angle feature",
        model={"candidate_features": ("travel", "wait", "slack", "arrival", "departure")},
    )
)
full_model, _ = lc.preset_configs("full_linc", "cvrptw")
new_model, _ = lc.preset_configs("no_angle", "cvrptw")
config_differences(full_model, new_model)

# %% [markdown]
# A typo is caught at once:

# %%
try:
    lc.register_preset(lc.Preset("typo", "typo", model={"scorr": "linc"}))
except ValueError as error:
    print(error)

# %% [markdown]
# ## Train both on the same batches
#
# The same seeds give both variants the same training batches and the same validation set
# (batches are a pure function of the seed, the epoch and the batch index), so the difference
# is the switch. Four epochs of a small model say nothing about the paper's claim: a real
# comparison runs seeds and epochs (`linc-ablation preset=cpu-repro`), with intervals.

# %%
results = {}
for variant in ("full_linc", "no_angle"):
    model_config, train_config = lc.preset_configs(
        variant,
        "cvrptw",
        num_rollouts=16,
        batch_size=8,
        instances_per_epoch=32,
        epochs=4,
        validation_size=16,
        seed=3,
    )
    model_config = dataclasses.replace(
        model_config, embedding_dim=64, encoder_layers=2, ff_hidden_dim=128
    )
    data = lc.GeneratedData.for_training("cvrptw", 20, train_config, seed=1)
    validation = lc.GeneratedData.for_training("cvrptw", 20, train_config, seed=2).batch(0, 0)
    fitted = lc.fit(lc.LincPolicy(model_config), train_config, data, validation=validation)
    results[variant] = fitted.history[-1]["validation_cost"]
    print(f"{variant:>10}: validation cost after 4 epochs {results[variant]:.2f}")

# %% [markdown]
# ## In a sweep
#
# A sweep's trials run in other processes, which know the presets of `linc_core/presets.py`.
# To sweep the variant, add the same line to `PRESETS` there (and its name to an ablation list
# in `linc_core/runs/protocols.py` if it belongs to one), then:
#
# ```bash
# .venv/bin/linc-ablation preset=smoke 'ablation.variants=[full_linc,no_angle]'
# ```
#
# The ablation table then has a *w/o angle feature* row with its gap to Full LINC, and each
# trial's MLflow run carries the variant and its effective switches as params.
