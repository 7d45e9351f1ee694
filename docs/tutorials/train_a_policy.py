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
# # Train, decode, verify and plot a CVRPTW policy
#
# This notebook uses `linc_core` alone: no Ray, MLflow or Hydra. It trains a small LINC policy
# on generated CVRPTW instances with 20 customers, decodes Solomon's C101 and R101 with it,
# has the independent verifier check every route, and plots the routes and the training curve.
# It runs in about a minute on a laptop CPU. The budget is tiny, so expect costs far from the
# best-known ones: the point is the path, not the number.
#
# Everything a notebook needs comes from one import.

# %%
import dataclasses

import linc_core as lc
from linc_core.evaluate.reporting import plot_routes
from linc_core.instances.benchmarks import data_dir, load_bks
from linc_core.utils.plotting import Picture, new_figure, png_bytes

# %% [markdown]
# On Linux, one call keeps freed tensor memory in the process for reuse, as the command lines
# do, so that the steps below stop paying page faults for their buffers (a few percent of a
# training step on CPU; a compiled decision at n=50 took 14.5 ms without it and 13.0 ms with it).

# %%
lc.tune_cpu_allocator()

# %% [markdown]
# ## The configs
#
# A *preset* is a named set of typed switches. `full_linc` is the paper's model; the twelve
# ablation variants are presets too (`lc.ABLATION_VARIANTS`). Keyword arguments override
# training settings. The sizes are given once, here, and the training data is built from the
# same config.

# %%
model_config, train_config = lc.preset_configs(
    "full_linc",
    "cvrptw",
    num_rollouts=16,  # K: rollouts per instance, one z-vector each
    batch_size=8,
    instances_per_epoch=32,
    epochs=4,
    validation_size=8,
    seed=7,
)
# a smaller encoder than the paper's (128 wide, 6 layers), for a laptop
model_config = dataclasses.replace(
    model_config, embedding_dim=64, encoder_layers=2, ff_hidden_dim=128
)
print(model_config.scorer, model_config.summary, model_config.centred_features)
print(train_config.advantage, train_config.rollout_mask, train_config.epochs)

# %% [markdown]
# ## Training
#
# `fit` runs REINFORCE over PolyNet z-vector rollouts: every epoch draws fresh instances (a
# pure function of the seed, the epoch and the batch index), so a resumed run sees the same
# batches. `PrintProgress` prints one line per epoch.

# %%
policy = lc.LincPolicy(model_config)
data = lc.GeneratedData.for_training("cvrptw", 20, train_config, seed=1)
validation = lc.GeneratedData.for_training("cvrptw", 20, train_config, seed=2).batch(0, 0)
result = lc.fit(policy, train_config, data, validation=validation, callbacks=[lc.PrintProgress()])

# %%
epochs = [record["epoch"] for record in result.history]
figure = new_figure(6, 3)
axes = figure.add_subplot()
axes.plot(epochs, [r["train_best_cost"] for r in result.history], marker="o", label="train best")
axes.plot(epochs, [r["validation_cost"] for r in result.history], marker="s", label="validation")
axes.set_xlabel("epoch")
axes.set_ylabel("mean route length")
axes.legend()
# A Picture carries its alternative text into the notebook's page (a screen reader reads it)
Picture(png_bytes(figure), "Mean route length per epoch: best training rollout and validation")

# %% [markdown]
# ## Decoding benchmark instances
#
# `read_instance` reads a Solomon, TSPLIB or CVRPLIB file by its content. `decode` samples
# `num_z` z-vectors on each of the 8 dihedral copies of the instance and keeps the best
# solution; its cost is recomputed in float64 on the instance as read.

# %%
solomon = data_dir() / "solomon100"
best_known = load_bks("solomon100")
decoding = lc.DecodeConfig(method="sampling", num_z=16, augment=8, seed=0)
solved = {}
for name in ("C101", "R101"):
    _, instance = lc.read_instance(solomon / f"{name}.txt")
    solved[name] = (instance, lc.decode(policy, instance, decoding))
    print(f"{name}: cost {float(solved[name][1].cost[0]):.1f}, best-known {best_known[name]}")

# %% [markdown]
# ## Verification
#
# The verifier is an independent numpy implementation: each customer once, the capacity, the
# time windows and the depot's due time, and the cost under a named distance convention. A
# solution the policy produced is never trusted without it.

# %%
for name, (instance, decoded) in solved.items():
    checked = lc.verify_instance(instance, 0, decoded.routes[0], convention="exact")
    print(name, "feasible" if checked.feasible else checked.kinds(), f"{checked.cost:.1f}")
    assert checked.feasible
    assert abs(checked.cost - float(decoded.cost[0])) < 1e-6

# %% [markdown]
# ## The routes

# %%
instance, decoded = solved["C101"]
cost = float(decoded.cost[0])
Picture(
    plot_routes(instance, decoded.routes[0], f"C101: {cost:.1f}"),
    f"The decoded routes of Solomon C101 (cost {cost:.1f}), one colour a vehicle, depot in red",
)

# %% [markdown]
# ## Where next
#
# - Train at the paper's scale from the command line: `linc-train --problem cvrptw --size 100`
#   (see *Training* in the concepts), or as a Ray Tune trial with MLflow tracking:
#   `linc-tune` (the next tutorial).
# - Save and reload: `fit(..., checkpoint_dir="runs/my-run")` writes `latest.pt` after every
#   epoch; `policy, payload = lc.policy_from_checkpoint("runs/my-run/latest.pt")` rebuilds the
#   policy and returns it with the checkpoint's contents (configs, epoch, metric history).
