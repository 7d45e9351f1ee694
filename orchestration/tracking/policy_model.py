"""A trained linc policy as an MLflow pyfunc model: instances in, verified routes out.

This file is the model's code (MLflow's "models from code"): it is logged with the policy's
checkpoint (artifact ``checkpoint``) and ``linc_core`` (as code), so the model loads wherever
torch, numpy, pyarrow and vrplib are installed, without linc's platform and without knowing
linc's checkpoint format (:mod:`orchestration.tracking.registry` logs and registers it).

``predict`` takes one instance per row (a DataFrame, a dict of columns, records or texts):
``instance``, the text of a Solomon, TSPLIB or CVRPLIB file (format read from the content) with
an optional ``name`` (default: the file's own, its ``NAME`` or Solomon's first line), or ``locs``
(``[[x, y], ...]``, node 0 the depot) with ``demand``, ``capacity``, ``time_windows`` and
``service_time`` as the policy's problem needs them (checked as a file's data is:
``linc_core.instances.validation``); and the decoding budget as params (``method``: sampling,
greedy, multistart or sgbs; ``num_z``; ``augment``: 1 or 8; ``seed``). It returns one row per
instance: ``name``, ``cost`` (exact Euclidean; None when infeasible), ``feasible`` and
``violations`` (the independent verifier's verdict), ``routes`` (JSON: lists of customer ids,
depot implicit; a TSP tour as one list), ``num_routes``, ``seconds``.

Bounds (:class:`ServingLimits`, from ``LINC_SERVE_*`` when the model loads): request bytes,
rows, customers per instance, decoding budget, and a deadline past which decoding stops. Bad
data (named by its row's index and name, field and value) or a request beyond the bounds is a
:class:`ServedError`: one line, HTTP 400 (504 past the deadline). Served, the model also guards
MLflow's request handler (:func:`_guard_scoring_server`).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, fields, replace
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import (
    DEADLINE_EXCEEDED,
    INTERNAL_ERROR,
    INVALID_PARAMETER_VALUE,
    TEMPORARILY_UNAVAILABLE,
    ErrorCode,
)
from mlflow.pyfunc import PythonModel

DEFAULT_PARAMS: dict[str, Any] = {"method": "sampling", "num_z": 128, "augment": 8, "seed": 0}
# Rollout x node cells decoded at once (the chunk size): a 3,000-customer row decoded 16,384
# rollouts at once (49 M cells) past 6 GB; 2 M cells stay near 250 MB.
STEP_CELLS = 2**21
MAX_LINE = 400  # characters of an error line
_TEMP_FILE = re.compile(r"[^\s'\"]*linc-instance-[^/\s'\"]*/[A-Za-z0-9._-]*")  # a row text's file

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServingLimits:
    """What one request may ask; each field is read from its ``LINC_SERVE_*`` variable."""

    max_request_bytes: int = 4_000_000  # the HTTP body, refused before it is parsed
    max_rows: int = 64  # instances per request
    max_customers: int = 1000  # per instance (the largest Gehring-Homberger set)
    max_budget: int = 2_000_000  # sum over rows of rollouts x augment x customers
    deadline_seconds: float = 30.0  # decoding stops past it (clamped to MLflow's timeout)
    compile: bool = False  # 0 or 1: torch.compile the decision step (docs: GPU runs)

    @classmethod
    def from_environment(cls, environ: Any = os.environ) -> ServingLimits:
        """The limits with ``LINC_SERVE_<FIELD>`` overrides (a bad value: one ValueError)."""
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = f"LINC_SERVE_{field.name.upper()}"
            if (text := environ.get(name)) is None:
                continue
            kind = {"deadline_seconds": float, "compile": bool}.get(field.name, int)
            try:
                value = int(text) if kind is bool else kind(text)
            except ValueError:
                value = None
            if value is None or not (value in (0, 1) if kind is bool else 0 < value < math.inf):
                expected = "0 or 1" if kind is bool else f"a positive {kind.__name__}"
                raise ValueError(f"{name}={text!r}: expected {expected}")
            values[field.name] = kind(value)
        limits = cls(**values)
        timeout = environ.get("MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT", "")
        if timeout.isdigit():  # past it the client has MLflow's 504: compute no longer
            limits = replace(limits, deadline_seconds=min(limits.deadline_seconds, int(timeout)))
        return limits


class ServedError(MlflowException):
    """An answer's error: one line, no traceback, HTTP status from ``code`` (MLflow's server
    prefixes the input's repr to a model's message, several lines; ``message`` ignores it)."""

    def __init__(self, line: str, code: int = INVALID_PARAMETER_VALUE) -> None:
        self._line = " ".join(str(line).split())[:MAX_LINE]
        super().__init__(self._line, error_code=code)

    # MLflow's server sets ``message`` (to its own several lines): the one line stays
    message = property(lambda self: self._line, lambda self, _: None)  # type: ignore[assignment]


class RequestRefused(ServedError, ValueError):
    """Bad data or a request beyond the limits: HTTP 400."""


class LincPolicyModel(PythonModel):
    """The pyfunc wrapper of a linc checkpoint (see the module docstring)."""

    # predict's input is hinted as a DataFrame, a hint MLflow infers no schema from (it warns on
    # every load without one): the signature is ``orchestration.tracking.registry.signature``.
    def load_context(self, context):
        from linc_core.train.loop import policy_from_checkpoint

        self.limits = ServingLimits.from_environment()
        self.policy, _ = policy_from_checkpoint(context.artifacts["checkpoint"])
        self.policy.eval()
        self.computing = threading.Lock()  # one request decodes at a time: its memory only
        _guard_scoring_server(self.limits)

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        from linc_core.decoding import DeadlineExceeded

        limits = self.limits
        deadline = time.monotonic() + limits.deadline_seconds
        try:
            return self._answer(model_input, params, limits, deadline)
        except ServedError:
            raise
        except DeadlineExceeded:
            raise ServedError(
                f"decoding stopped at the {limits.deadline_seconds:g} s deadline "
                "(LINC_SERVE_DEADLINE_SECONDS): ask for fewer rollouts (num_z, augment), "
                "fewer rows or smaller instances",
                DEADLINE_EXCEEDED,  # HTTP 504
            ) from None
        except Exception as err:
            logger.exception("linc policy: internal error")
            raise ServedError(
                f"internal error ({type(err).__name__}); the server's log has the details",
                INTERNAL_ERROR,  # HTTP 500
            ) from None

    def _answer(
        self, model_input: Any, params: Any, limits: ServingLimits, deadline: float
    ) -> pd.DataFrame:
        from linc_core.evaluate import evaluate_policy

        config = self._config(params)
        records = _records(model_input)
        if not records:
            raise RequestRefused(
                "no rows: send one instance per row, in columns instance (a file's text) and name, "
                "or locs, demand, capacity, time_windows, service_time (MLflow drops inputs its "
                "signature does not name, as a bare list of texts: send {'instance': [texts]})"
            )
        if len(records) > limits.max_rows:
            raise RequestRefused(
                f"{len(records)} rows: more than {limits.max_rows} (LINC_SERVE_MAX_ROWS)"
            )
        instances = [self._instance(r, i, limits) for i, r in enumerate(records)]
        budget = sum(self._rollouts(config, i.num_customers) * i.num_customers for i in instances)
        if budget > limits.max_budget:
            raise RequestRefused(
                f"decoding budget {budget} (rollouts x augment x customers, summed over rows) "
                f"is more than {limits.max_budget} (LINC_SERVE_MAX_BUDGET): lower num_z or "
                "augment, or send fewer rows"
            )
        lock = self.computing
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise ServedError(  # HTTP 503
                "another request kept the model busy past this one's deadline",
                TEMPORARILY_UNAVAILABLE,
            )
        try:
            rows = []
            for instance in instances:  # one at a time: memory is that of one instance
                device = next(self.policy.parameters()).device
                chunk = min(config.rollouts_per_chunk(device), STEP_CELLS // instance.num_nodes)
                bounded = replace(config, max_rollouts_per_chunk=max(1, chunk))
                evaluation = evaluate_policy(
                    self.policy, instance, bounded, convention="exact", deadline=deadline
                )
                rows.append(answer_row(evaluation))
        finally:
            lock.release()
        return answer_frame(rows)

    def _config(self, params: Any) -> Any:
        from linc_core.decoding import DECODE_METHODS, DecodeConfig

        budget = DEFAULT_PARAMS | dict(params or {})
        method = str(budget["method"])
        if method not in DECODE_METHODS:
            raise RequestRefused(f"params: method {method!r} is none of {list(DECODE_METHODS)}")
        values: dict[str, Any] = {"compile": self.limits.compile}  # LINC_SERVE_COMPILE
        for name in ("num_z", "augment", "seed"):
            value = budget[name]
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise RequestRefused(f"params: {name} = {str(value)[:40]!r} is not an integer")
            values[name] = int(value)
        if values["augment"] not in (1, 8):
            raise RequestRefused(f"params: augment = {values['augment']}: expected 1 or 8")
        most = 2**z_dim if (z_dim := self.policy.config.z_dim) > 0 else 2**62
        if not 1 <= values["num_z"] <= most:
            raise RequestRefused(f"params: num_z = {values['num_z']}: expected 1 to {most}")
        return DecodeConfig(method=method, **values)  # type: ignore[arg-type]

    def _rollouts(self, config: Any, customers: int) -> int:
        """Rollouts per instance (augmented copies included) that ``config`` decodes."""
        if config.method == "multistart":
            per_copy = customers
        elif config.method == "sgbs":
            per_copy = config.sgbs_z + config.beam_width * (config.expansion - 1) * customers
        elif config.method == "greedy" and self.policy.config.z_dim == 0:
            per_copy = 1
        else:
            per_copy = config.num_z
        return per_copy * config.augment

    def _instance(self, record: dict[str, Any], index: int, limits: ServingLimits) -> Any:
        from linc_core.instances import InstanceError
        from linc_core.instances.any_file import name_in_text, read_instance_text
        from linc_core.instances.validation import instance_from_arrays
        from linc_core.problems.spec import problem_spec

        problem = self.policy.config.problem
        text = record.get("instance")
        given_text = isinstance(text, str) and bool(text.strip())
        if not (given_text or _present(record.get("locs"))):
            columns = sorted(str(key) for key in record if _present(record.get(key)))
            raise RequestRefused(
                f"row {index}: neither 'instance' (a benchmark file's text) nor 'locs' "
                f"(coordinates) given; columns with values: {columns or 'none'}"
            )
        if given_text and len(text) > limits.max_request_bytes:
            raise RequestRefused(
                f"row {index}: instance text of {len(text)} characters, more than "
                f"{limits.max_request_bytes} (LINC_SERVE_MAX_REQUEST_BYTES)"
            )
        own_name = name_in_text(text) if given_text else None
        name = str(record.get("name") or own_name or f"instance{index}")[:80]
        row = f"row {index} ({name if name.isprintable() else repr(name)})"
        if not given_text:  # refused before its tensors are built
            nodes = len(record["locs"]) if hasattr(record["locs"], "__len__") else 0
            _check_customers(nodes - int(problem_spec(problem).has_depot), row, limits)
        try:  # a bad row is one 400 line naming the row, not the readers' temporary file
            if given_text:
                _, instance = read_instance_text(text, name)
            else:
                fields_given = ("demand", "capacity", "time_windows", "service_time")
                given = {key: record[key] for key in fields_given if _present(record.get(key))}
                instance = instance_from_arrays(problem, row, record["locs"], names=[name], **given)
        except (InstanceError, OverflowError, ValueError) as bad:
            raise bad_row(row, bad) from None
        if instance.problem != problem:
            raise RequestRefused(f"{row}: {instance.problem} instance; this model solves {problem}")
        _check_customers(instance.num_customers, row, limits)
        return instance


def bad_row(row: str, bad: Exception) -> RequestRefused:
    """Row ``row``'s bad data (``InstanceError``, a reader's ``ValueError`` or ``OverflowError``)
    in one line naming the row, field and value, never the temporary file of the row's text."""
    from linc_core.instances import InstanceError

    if isinstance(bad, InstanceError):  # its source: that temporary file
        return RequestRefused(f"{row}: field '{bad.field}' = {bad.value!r}: {bad.problem}")
    return RequestRefused(f"{row}: bad instance data: {_TEMP_FILE.sub('the instance', str(bad))}")


def _check_customers(customers: int, row: str, limits: ServingLimits) -> None:
    if customers > limits.max_customers:
        raise RequestRefused(
            f"{row}: {customers} customers, more than {limits.max_customers} "
            "(LINC_SERVE_MAX_CUSTOMERS)"
        )


def _records(model_input: Any) -> list[dict[str, Any]]:
    """One dict per row of what MLflow hands over: a DataFrame (MLflow turns a dict into one
    row, whose cells may be columns: a list of texts, a list of ``locs``), records or texts."""
    if isinstance(model_input, pd.DataFrame):
        records = model_input.to_dict("records")
    elif isinstance(model_input, dict):
        records = [model_input]
    elif isinstance(model_input, list | tuple | np.ndarray | pd.Series) and all(
        isinstance(row, dict | str) for row in model_input
    ):
        records = [row if isinstance(row, dict) else {"instance": row} for row in model_input]
    else:
        raise RequestRefused(f"input of type {type(model_input).__name__}: expected rows")
    if len(records) == 1 and _is_columns(records[0]):
        columns = {k: v for k, v in records[0].items() if _present(v)}
        lengths = {
            len(v) if isinstance(v, list | tuple | np.ndarray) else -1 for v in columns.values()
        }
        if len(lengths) != 1 or -1 in lengths:
            raise RequestRefused(f"columns {sorted(columns)}: expected lists of one length")
        return [{k: v[i] for k, v in columns.items()} for i in range(lengths.pop())]
    return records


def _is_columns(record: dict[str, Any]) -> bool:
    """Whether a row holds a column per field (texts, or ``locs`` of several instances)."""
    text, locs = record.get("instance"), record.get("locs")
    if isinstance(text, list | tuple | np.ndarray):
        return all(isinstance(item, str) for item in text)
    try:
        return not isinstance(locs, str) and len(np.shape(locs[0][0])) > 0
    except (TypeError, IndexError, KeyError, ValueError):
        return False


def answer_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The answer's rows as a frame whose ``cost`` keeps None (a float column would make it
    NaN, which MLflow's server writes as ``NaN``: not JSON)."""
    frame = pd.DataFrame(rows)
    frame["cost"] = pd.Series([row["cost"] for row in rows], dtype=object)
    return frame


def answer_row(evaluation: Any) -> dict[str, Any]:
    """One instance's answer: plain JSON values (a cost that is not finite is None)."""
    row = evaluation.rows[0]
    solution = evaluation.solutions.get(row.instance) or []
    cost = float(row.cost_exact)
    return {
        "name": row.instance,
        "cost": cost if math.isfinite(cost) else None,
        "feasible": bool(row.feasible),
        "violations": row.error,
        "routes": json.dumps(solution),
        "num_routes": int(row.num_routes),
        "seconds": float(row.seconds) if math.isfinite(row.seconds) else 0.0,
    }


def _present(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _one_line(err: Exception) -> ServedError:
    """An error of MLflow's (input echoed, maybe a traceback) or of JSON's, as one line."""
    if isinstance(err, ServedError):
        return err
    if isinstance(err, RecursionError):  # the JSON decoder's, on deeply nested arrays
        return RequestRefused("the request's JSON is nested too deeply")
    if isinstance(err, ValueError) and "integer string conversion" in str(err):  # JSON's too
        return RequestRefused("the request's JSON has an integer of more than 4300 digits")
    if not isinstance(err, MlflowException):
        return ServedError(f"internal error ({type(err).__name__}) in the server", INTERNAL_ERROR)
    text = err.message
    if "Failed to enforce schema" in text or "Invalid parameters" in text:
        text = "input does not fit the model's signature: " + text.rpartition("Error: ")[2]
    line = text.strip().splitlines()[0] if text.strip() else "bad request"
    return ServedError(line, ErrorCode.Value(err.error_code))


def _guard_scoring_server(limits: ServingLimits) -> None:
    """Under ``mlflow models serve``: the request handler refuses a body over ``max_request_bytes``
    before parsing it, and answers every error in one line.

    MLflow 3.17's FastAPI app reads the whole body, then calls the module function
    ``scoring_server.invocations`` (looked up per request) in a worker thread, so ``/ping`` is
    served meanwhile on the event loop. It has no body limit, echoes the input in parse errors
    and puts a traceback in the answer of any other exception."""
    from mlflow.pyfunc import scoring_server

    if getattr(scoring_server, "_SERVER_MODEL_PATH", "") not in os.environ:
        return  # loaded by load_model, not served
    original = scoring_server.invocations
    if getattr(original, "linc_guard", False):
        return

    @functools.wraps(original)
    def invocations(data, content_type, model, input_schema):  # noqa: ANN001, ANN202
        if len(data) > limits.max_request_bytes:
            raise RequestRefused(
                f"request body of {len(data)} bytes: more than {limits.max_request_bytes} "
                "(LINC_SERVE_MAX_REQUEST_BYTES)"
            )
        try:
            return original(data, content_type, model, input_schema)
        except Exception as err:
            if not isinstance(err, ServedError):
                logger.warning("linc policy: a request refused by MLflow", exc_info=True)
            raise _one_line(err) from None

    invocations.linc_guard = True  # type: ignore[attr-defined]
    scoring_server.invocations = invocations


mlflow.models.set_model(LincPolicyModel())
