"""A trained linc policy as an MLflow pyfunc model: instances in, verified routes out.

This file is the model's code (MLflow's "models from code"): it is logged with the policy's
checkpoint (artifact ``checkpoint``) and ``linc_core`` (as code), so the model loads wherever
torch, numpy, pyarrow and vrplib are installed, without linc's platform and without knowing
linc's checkpoint format (:mod:`orchestration.tracking.registry` logs and registers it).

``predict`` takes a DataFrame, one instance per row, either

- ``instance``: the text of a Solomon, TSPLIB or CVRPLIB file (format read from the content),
  with an optional ``name`` (default: the file's own, its ``NAME`` or Solomon's first line); or
- ``locs`` (``[[x, y], ...]``, node 0 the depot), with ``demand``, ``capacity``,
  ``time_windows`` and ``service_time`` as the policy's problem needs them;

and the decoding budget as params (``method``: sampling, greedy, multistart or sgbs; ``num_z``;
``augment``: 1 or 8; ``seed``). It returns one row per instance: ``name``, ``cost`` (exact
Euclidean), ``feasible`` and ``violations`` (the independent verifier's verdict), ``routes``
(JSON: lists of customer ids, depot implicit; a TSP tour as one list), ``num_routes``,
``seconds``.
"""

from __future__ import annotations

import json
from typing import Any

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

DEFAULT_PARAMS: dict[str, Any] = {"method": "sampling", "num_z": 128, "augment": 8, "seed": 0}


class LincPolicyModel(PythonModel):
    """The pyfunc wrapper of a linc checkpoint (see the module docstring)."""

    # predict's input is hinted as a DataFrame, a hint MLflow infers no schema from (it warns
    # on every load without a hint): the signature is the registry's
    # (``orchestration.tracking.registry.signature``).
    def load_context(self, context):
        from linc_core.train.loop import policy_from_checkpoint

        self.policy, _ = policy_from_checkpoint(context.artifacts["checkpoint"])
        self.policy.eval()

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        from linc_core.decode import DecodeConfig
        from linc_core.evaluate import evaluate_policy

        budget = DEFAULT_PARAMS | dict(params or {})
        config = DecodeConfig(
            method=str(budget["method"]),
            num_z=int(budget["num_z"]),
            augment=int(budget["augment"]),
            seed=int(budget["seed"]),
        )
        records = (
            model_input.to_dict("records") if hasattr(model_input, "to_dict") else list(model_input)
        )
        instances = [self._instance(record, index) for index, record in enumerate(records)]
        evaluation = evaluate_policy(self.policy, instances, config, convention="exact")
        rows = []
        for row in evaluation.rows:
            solution = evaluation.solutions.get(row.instance) or []
            rows.append(
                {
                    "name": row.instance,
                    "cost": row.cost_exact,
                    "feasible": bool(row.feasible),
                    "violations": row.error,
                    "routes": json.dumps(solution),
                    "num_routes": int(row.num_routes),
                    "seconds": float(row.seconds),
                }
            )
        return pd.DataFrame(rows)

    def _instance(self, record: dict[str, Any], index: int) -> Any:
        from linc_core.instances import Instance
        from linc_core.instances.any_file import name_in_text, read_instance_text

        problem = self.policy.config.problem
        text = record.get("instance")
        given_text = isinstance(text, str) and bool(text.strip())
        own_name = name_in_text(text) if given_text else None
        name = str(record.get("name") or own_name or f"instance{index}")
        if given_text:
            _, instance = read_instance_text(text, name)
        else:
            fields = ("demand", "capacity", "time_windows", "service_time")
            given = {key: record[key] for key in fields if _present(record.get(key))}
            instance = Instance.from_arrays(problem, record["locs"], names=[name], **given)
        if instance.problem != problem:
            raise ValueError(
                f"{name}: a {instance.problem} instance, but this model solves {problem}"
            )
        return instance


def _present(value: Any) -> bool:
    try:
        return value is not None and not (isinstance(value, float) and value != value)
    except TypeError:
        return True


mlflow.models.set_model(LincPolicyModel())
