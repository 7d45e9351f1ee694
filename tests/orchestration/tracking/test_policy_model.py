"""The pyfunc policy model (``orchestration.tracking.policy_model``) called from Python: its
limits from the environment, every input form MLflow passes on, answers that are JSON.
(Served over HTTP, under attack: tests/security/test_served_model_bounds.py.)"""

from __future__ import annotations

import io
import json
import math
import warnings

import mlflow
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from mlflow.pyfunc.scoring_server import predictions_to_json

from linc_core.evaluate.scoring import EvalRow, Evaluation
from linc_core.train.data import generate
from orchestration.tracking.policy_model import ServingLimits, answer_frame, answer_row, bad_row

SMALL = {"method": "sampling", "num_z": 2, "augment": 1, "seed": 0}


def load(path, monkeypatch, **env: str):
    """The model at ``path`` loaded with ``LINC_SERVE_*`` variables ``env`` set."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mlflow.pyfunc.load_model(str(path))


def arrays(customers: int, seed: int = 5) -> dict:
    instance = generate("cvrptw", 1, customers, seed=seed)
    return {
        "locs": instance.locs[0].tolist(),
        "demand": instance.demand[0].tolist(),
        "capacity": float(instance.capacity[0]),
        "time_windows": instance.time_windows[0].tolist(),
        "service_time": instance.service_time[0].tolist(),
    }


def test_the_limits_come_from_the_environment_with_safe_defaults() -> None:
    defaults = ServingLimits.from_environment({})
    assert defaults == ServingLimits()
    assert (defaults.max_request_bytes, defaults.max_customers) == (4_000_000, 1000)
    given = {"LINC_SERVE_MAX_ROWS": "3", "LINC_SERVE_DEADLINE_SECONDS": "2.5"}
    assert ServingLimits.from_environment(given).max_rows == 3
    assert ServingLimits.from_environment(given).deadline_seconds == 2.5
    # no decoding after MLflow's own timeout has answered the client (504)
    clamped = {"MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT": "10"}
    assert ServingLimits.from_environment(clamped).deadline_seconds == 10
    for bad in ("-1", "0", "many", "inf"):
        with pytest.raises(ValueError, match=f"^LINC_SERVE_MAX_BUDGET='{bad}': expected a pos"):
            ServingLimits.from_environment({"LINC_SERVE_MAX_BUDGET": bad})
    # a switch, not a bound: torch.compile of the decision step
    assert not defaults.compile
    assert ServingLimits.from_environment({"LINC_SERVE_COMPILE": "1"}).compile is True
    assert ServingLimits.from_environment({"LINC_SERVE_COMPILE": "0"}).compile is False
    for bad in ("2", "-1", "yes"):
        with pytest.raises(ValueError, match=f"^LINC_SERVE_COMPILE='{bad}': expected 0 or 1$"):
            ServingLimits.from_environment({"LINC_SERVE_COMPILE": bad})


@pytest.mark.slow  # about 30 s of compiling; compiled decoding is tested in linc_core's tests
def test_a_compiled_model_answers_as_the_eager_one(tiny_policy_model, monkeypatch) -> None:
    row = arrays(6)
    eager = load(tiny_policy_model, monkeypatch).predict(row, params=SMALL)
    monkeypatch.setenv("LINC_SERVE_COMPILE", "1")
    compiled = load(tiny_policy_model, monkeypatch).predict(row, params=SMALL)
    assert list(compiled["routes"]) == list(eager["routes"])
    assert list(compiled["cost"]) == list(eager["cost"])  # exact lengths of the same routes


def test_every_input_form_answers_or_says_what_to_send(
    tiny_policy_model, monkeypatch, data_dir
) -> None:
    model = load(tiny_policy_model, monkeypatch)
    row = arrays(6)
    lines = (data_dir / "solomon100" / "C101.txt").read_text().splitlines()
    text = "\n".join(lines[: next(i for i, x in enumerate(lines) if x.split()[:1] == ["6"]) + 1])
    answers = {
        "frame": model.predict(pd.DataFrame([row, arrays(6, seed=6)]), params=SMALL),
        "records": model.predict([row, arrays(6, seed=6)], params=SMALL),
        "one record": model.predict(row, params=SMALL),
        # (MLflow takes a dict as one row when its signature has array columns: columns of
        # texts are read as columns here, columns of arrays MLflow itself refuses)
        "dict of columns": model.predict({"instance": [text, text], "name": ["a", "b"]}, SMALL),
    }
    assert list(answers["dict of columns"]["name"]) == ["a", "b"]
    for form, answer in answers.items():
        assert len(answer) == (1 if form == "one record" else 2), form
        assert answer["feasible"].all() and answer["cost"].map(math.isfinite).all(), form
    # MLflow drops a bare list of texts (no column its signature names): one line, not []
    with pytest.raises(ValueError, match=r"^no rows: .*send \{'instance': \[texts\]\}"):
        model.predict(["NAME : x\nTYPE : CVRP\n"], params=SMALL)
    with pytest.raises(ValueError, match=r"^row 0: neither 'instance' .* nor 'locs'"):
        model.predict(pd.DataFrame({"name": ["x"]}), params=SMALL)


def test_the_limits_refuse_in_one_line_before_decoding(tiny_policy_model, monkeypatch) -> None:
    model = load(
        tiny_policy_model, monkeypatch, LINC_SERVE_MAX_ROWS="1", LINC_SERVE_MAX_CUSTOMERS="5"
    )
    cases = {
        "rows": ([arrays(3), arrays(3)], SMALL, "2 rows: more than 1 (LINC_SERVE_MAX_ROWS)"),
        "customers": ([arrays(6)], SMALL, "row 0 (instance0): 6 customers, more than 5"),
        "budget": ([arrays(5)], {"num_z": 65536, "augment": 8}, "LINC_SERVE_MAX_BUDGET"),
        "augment": ([arrays(5)], {"augment": 3}, "params: augment = 3: expected 1 or 8"),
        "num_z": ([arrays(5)], {"num_z": 65537}, "params: num_z = 65537: expected 1 to 65536"),
        "method": ([arrays(5)], {"method": "exhaustive"}, "params: method 'exhaustive'"),
    }
    for name, (rows, params, line) in cases.items():
        with pytest.raises(MlflowException) as refused:
            model.predict(rows, params=params)
        assert line in refused.value.message and refused.value.get_http_status_code() == 400, name
        assert "\n" not in refused.value.message


def test_an_infeasible_answer_is_json_with_a_null_cost() -> None:
    nan = math.nan
    row = EvalRow("bad", "LINC", 3, False, nan, nan, 2, nan, nan, nan, nan, 0.1, "infeasible (x)")
    answer = answer_row(Evaluation([row], {}, {"bad": [[1], [2, 3]]}))
    assert answer["cost"] is None and answer["routes"] == "[[1], [2, 3]]"
    written = io.StringIO()
    predictions_to_json(answer_frame([answer]), written)  # what MLflow's server sends

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    (sent,) = json.loads(written.getvalue(), parse_constant=refuse)["predictions"]
    assert sent["cost"] is None and sent["feasible"] is False


def solomon_text(data_dir, customers: int, change: tuple[int, int, str] | None = None) -> str:
    """C101's depot and first ``customers`` customers; ``change`` = (node, column, token)."""
    lines = (data_dir / "solomon100" / "C101.txt").read_text().splitlines()
    last = next(i for i, x in enumerate(lines) if x.split()[:1] == [str(customers)])
    lines = lines[: last + 1]
    if change is not None:
        node, column, token = change
        at = next(i for i, x in enumerate(lines) if x.split()[:1] == [str(node)])
        tokens = lines[at].split()
        tokens[column] = token
        lines[at] = "   ".join(tokens)
    return "\n".join(lines) + "\n"


def vrplib_text(kind: str, x: str) -> str:
    """A 3-node TSPLIB or CVRPLIB file whose node 2 has x coordinate ``x``."""
    head = f"NAME : tiny\nTYPE : {kind}\nDIMENSION : 3\nEDGE_WEIGHT_TYPE : EUC_2D\n"
    coords = f"NODE_COORD_SECTION\n1 0 0\n2 {x} 1\n3 2 2\n"
    if kind == "TSP":
        return head + coords + "EOF\n"
    loads = "DEMAND_SECTION\n1 0\n2 1\n3 1\nDEPOT_SECTION\n1\n-1\n"
    return head + "CAPACITY : 10\n" + coords + loads + "EOF\n"


def test_a_bad_row_is_a_400_naming_its_row_field_and_value_never_a_server_path(
    tiny_policy_model, monkeypatch, data_dir
) -> None:
    # before: a row's text was read from a server temp file, named in the answer
    # (/tmp/linc-instance-4ain1ne_/C101.txt: field 'demand[3]' = -5), and a reader's
    # OverflowError on inf or 1e400 coordinates answered HTTP 500 "internal error"
    model = load(tiny_policy_model, monkeypatch)
    good = solomon_text(data_dir, 6)
    cases = {
        "inf": (solomon_text(data_dir, 6, (3, 1, "inf")), "field 'CUSTOMER row 3 XCOORD.' = 'inf'"),
        "nan": (solomon_text(data_dir, 6, (3, 2, "nan")), "field 'CUSTOMER row 3 YCOORD.' = 'nan'"),
        "1e400": (solomon_text(data_dir, 6, (0, 1, "1e400")), "XCOORD.' = '1e400'"),
        "-5 demand": (solomon_text(data_dir, 6, (3, 3, "-5")), "field 'demand[3]' = -5"),
        "tsplib inf": (vrplib_text("TSP", "inf"), "field 'NODE_COORD_SECTION node 2 x' = 'inf'"),
        "cvrplib 1e400": (vrplib_text("CVRP", "1e400"), "node 2 x' = '1e400'"),
        "cvrplib -inf": (vrplib_text("CVRP", "-inf"), "node 2 x' = '-inf'"),
        "no instance": ("TYPE : VRP\n", "field 'instance' = 'TYPE : VRP\\n': neither"),
        "cvrp, not cvrptw": (vrplib_text("CVRP", "1"), "cvrp instance; this model solves cvrptw"),
    }
    for case, (text, fragment) in cases.items():
        with pytest.raises(MlflowException) as refused:
            model.predict({"instance": [good, text], "name": ["ok", "C101-x"]}, params=SMALL)
        line = refused.value.message
        assert refused.value.get_http_status_code() == 400, (case, line)
        assert line.startswith("row 1 (C101-x): ") and fragment in line, (case, line)
        assert "linc-instance" not in line and "/tmp" not in line and "\n" not in line, line
    # a row of arrays, a name that could break the line: the same form, the name quoted
    row = arrays(6) | {"name": "evil\x1b[2Jname"}
    row["locs"][2] = [math.inf, 1.0]
    with pytest.raises(MlflowException) as refused:
        model.predict([arrays(6), row], params=SMALL)
    assert refused.value.get_http_status_code() == 400
    assert refused.value.message == (
        "row 1 ('evil\\x1b[2Jname'): field 'locs[2]' = [inf, 1.0]: non-finite coordinate"
    )
    # the row's own NAME line names it when no name column is given
    with pytest.raises(MlflowException, match=r"^row 0 \(tiny\): field 'NODE_COORD_SECTION"):
        model.predict({"instance": [vrplib_text("TSP", "nan")]}, params=SMALL)


def test_a_readers_overflow_or_value_error_is_a_400_naming_the_row() -> None:
    try:
        math.ceil(float("1e400"))  # what a reader once raised on a 1e400 coordinate
    except OverflowError as err:
        overflow = bad_row("row 2 (X-n101)", err)
    assert overflow.get_http_status_code() == 400 and isinstance(overflow, ValueError)
    assert overflow.message == (
        "row 2 (X-n101): bad instance data: cannot convert float infinity to integer"
    )
    # a message naming the server's temporary file (any temp folder) keeps none of its path
    for path in ("/tmp/linc-instance-4ain1ne_/C101.txt", "/var/tmp/x/linc-instance-q1/a.vrp"):
        refused = bad_row("row 0 (C101)", ValueError(f"could not read {path}: bad line 'x'"))
        assert (
            refused.message
            == "row 0 (C101): bad instance data: could not read the instance: bad line 'x'"
        )
