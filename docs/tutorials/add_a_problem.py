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
# # Add a problem
#
# What linc knows about a routing problem is one `ProblemSpec`: its instance fields, its
# batched environment and consequence features, the step summary, the generator, the data
# checks, the verifier rule, the PyVRP fleet and the model defaults. Every part of linc (the
# configs, the model, `fit`, `decode`, the verifier, Parquet, PyVRP) reads the spec from a
# registry, so a new problem is one module and one call to `register_problem`.
#
# The example is CVRP with a route-length limit: every route, depot to depot, is at most
# `max_route_length` long. Its module, `examples/route_limit.py`, is the whole of it; this
# notebook reads its parts, registers it, and trains, decodes, verifies and solves it.

# %%
import dataclasses
import inspect
import sys
from pathlib import Path

from IPython.display import Code

import linc_core as lc

# examples/ is not installed with linc: it lives in the checkout's root. Wherever the notebook
# runs from, that is the checkout linc_core is imported from (an editable install, `make
# setup`), else the checkout the notebook runs in.
here = Path.cwd().resolve()
places = (Path(lc.__file__).resolve().parents[1], here, *here.parents)
root = next((p for p in places if (p / "examples" / "route_limit.py").is_file()), None)
if root is None:
    raise FileNotFoundError(
        f"examples/route_limit.py: not beside linc_core ({lc.__file__}) nor above {here}; "
        "run the notebook from a linc checkout"
    )
sys.path.insert(0, str(root))

from examples import route_limit  # noqa: E402
from linc_core.evaluate.pyvrp_solver import solve_with_pyvrp  # noqa: E402
from linc_core.problems import problem_names, register_problem  # noqa: E402

# %% [markdown]
# ## The state and the mask
#
# The environment extends CVRP's: its state carries `route_length`, the distance driven since
# the route left the depot, and a customer is feasible only if the vehicle can visit it and
# still get home within the limit.

# %%
Code(inspect.getsource(route_limit.RouteLimitEnv._decision_state), language="python")

# %% [markdown]
# ## The consequence feature
#
# LINC scores each candidate by its exact one-step consequences. The new one is `route_slack`,
# the share of the limit left after visiting the candidate and going home; it is *relative*
# (its mean over the feasible set is subtracted before scoring) and its minimum over the
# feasible set joins the step summary.

# %%
Code(inspect.getsource(route_limit.RouteLimitEnv.consequences), language="python")

# %% [markdown]
# ## The spec
#
# Everything else is named in the spec: the verifier rule (CVRP's checks and every route's
# length within the limit), the generator, the data check and the PyVRP fleet (vehicles with a
# `max_distance`).

# %%
Code(inspect.getsource(route_limit).split("ROUTE_LIMIT = ")[1], language="python")

# %%
register_problem(route_limit.ROUTE_LIMIT)
print(problem_names())

# %% [markdown]
# ## Instances
#
# The generator draws uniform CVRP instances and a limit per instance, 1.2 times the longest
# round trip to one customer: it binds, since a CVRP route of the same instances is often
# longer. The limit is an extra field of the `Instance` (stored in Parquet like the others).

# %%
instances = route_limit.generate(4, 10, seed=5)
print(instances.problem, [round(float(v), 3) for v in instances.extras["max_route_length"]])

# %% [markdown]
# ## Train, decode and verify
#
# The model configuration comes from the problem's defaults (`ModelConfig.for_problem`); the
# rest is the same as for the shipped problems.

# %%
model_config = dataclasses.replace(
    lc.ModelConfig.for_problem(route_limit.NAME),
    embedding_dim=32,
    encoder_layers=1,
    ff_hidden_dim=64,
    scorer_hidden_dim=16,
)
train_config = lc.TrainConfig(
    num_rollouts=8, batch_size=8, instances_per_epoch=16, epochs=3, validation_size=8, seed=1
)
policy = lc.LincPolicy(model_config)
data = lc.GeneratedData.for_training(route_limit.NAME, 10, train_config, seed=1)
lc.fit(policy, train_config, data, callbacks=[lc.PrintProgress()])

test = route_limit.generate(2, 10, seed=99)
decoded = lc.decode(policy, test, lc.DecodeConfig(method="sampling", num_z=8, augment=8))
for row in range(2):
    checked = lc.verify_instance(test, row, decoded.routes[row])
    print(f"instance {row}: cost {checked.cost:.3f}, violations {checked.kinds() or 'none'}")
    assert checked.feasible

# %% [markdown]
# ## A reference solution from PyVRP
#
# The spec's PyVRP fleet gives the solver the same limit, so its solution passes the same
# verifier: the gap to it is what a trained policy is measured by.

# %%
reference = solve_with_pyvrp(test, 0, seconds=1.0)
print(f"PyVRP: {reference.cost:.3f}; the policy above: {float(decoded.cost[0]):.3f}")
assert reference.verify.feasible
