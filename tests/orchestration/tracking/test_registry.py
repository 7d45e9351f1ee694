"""The model registry (``orchestration.tracking.registry``): a sweep's best policy registered as
a pyfunc model, loaded by ``models:/NAME/VERSION``, served by ``mlflow models serve``."""

from __future__ import annotations

import json
import os
import warnings

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from linc_core.instances import read_solomon
from linc_core.train.data import generate
from linc_core.verify import verify_instance
from orchestration.experiment.ablation import run_ablation
from orchestration.tracking.registry import registered_version
from sweeps.compose import load_platform_config
from sweeps.report import main as report_main
from tests.conftest import answer_json, served_model

BUDGET = {"method": "sampling", "num_z": 8, "augment": 1, "seed": 3}


@pytest.fixture(scope="module")
def registered(ray_session, tmp_path_factory):
    """A smoke ablation that registers its best policy as ``linc-smoke``."""
    folder = tmp_path_factory.mktemp("registry")
    config = load_platform_config(
        ["preset=smoke", f"cluster.storage={folder / 'runs'}", "tracking.register=linc-smoke"]
    )
    result = run_ablation(config)
    uri = f"sqlite:///{folder / 'runs' / 'mlflow.db'}"
    return result, uri, folder


def loaded(uri: str, version: str = "1"):
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        return mlflow.pyfunc.load_model(f"models:/linc-smoke/{version}")
    finally:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        mlflow.set_tracking_uri(before or "")


def test_the_sweeps_best_trial_is_registered_and_described(registered) -> None:
    result, uri, _ = registered
    assert result.registered == "linc-smoke/1"
    client = MlflowClient(tracking_uri=uri)
    version = client.get_model_version("linc-smoke", "1")
    trial = client.get_run(version.tags["trial_run"])
    parent = client.get_run(result.parent_run_id)
    siblings = [
        r for r in client.search_runs([trial.info.experiment_id]) if "variant" in r.data.tags
    ]
    best = min(siblings, key=lambda r: r.data.metrics["eval_cost"])
    assert trial.info.run_id == best.info.run_id  # the lowest eval_cost
    assert version.tags["variant"] == trial.data.tags["variant"]
    assert version.tags["seed"] == trial.data.tags["seed"]
    assert version.tags["sweep"] == "ablation-smoke"
    assert float(version.tags["eval_cost"]) == pytest.approx(trial.data.metrics["eval_cost"], 1e-4)
    assert parent.data.tags["registered_model"] == "linc-smoke/1"
    assert version.run_id == trial.info.run_id  # logged on the trial's own run
    # the version says how to use it: the calls, the serving command, the params' defaults
    described = version.description
    assert 'model = mlflow.pyfunc.load_model("models:/linc-smoke/1")' in described
    assert "mlflow models serve -m models:/linc-smoke/1 --env-manager local" in described
    assert "| `num_z` | long | `128` |" in described and "| `augment` | long | `8` |" in described
    # the parent's description links its best run (tags are plain text in the UI)
    page = f"#/experiments/{trial.info.experiment_id}/runs/{trial.info.run_id}"
    assert (
        f"The best run: [{trial.info.run_id}]({page})." in parent.data.tags["mlflow.note.content"]
    )
    assert "(#/models/linc-smoke/versions/1)" in parent.data.tags["mlflow.note.content"]


def test_the_input_example_is_a_small_instance_the_model_solves(registered) -> None:
    _, uri, _ = registered
    model = loaded(uri)
    example = model.input_example  # what the registry's page shows
    row = example.iloc[0] if isinstance(example, pd.DataFrame) else example[0].iloc[0]
    assert len(row["locs"]) == 11 and row["name"] == "example-cvrptw"
    answer = model.predict(pd.DataFrame([row.to_dict()]), params=BUDGET).iloc[0]
    assert bool(answer["feasible"]) and answer["violations"] in ("", "[]", None)


def test_the_loaded_model_solves_c101_with_a_verified_solution(registered, data_dir) -> None:
    _, uri, _ = registered
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        model = loaded(uri)
    assert not [w for w in told if "type hint" in str(w.message)]  # a quiet load
    text = (data_dir / "solomon100" / "C101.txt").read_text()
    out = model.predict(pd.DataFrame({"instance": [text], "name": ["C101"]}), params=BUDGET)
    row = out.iloc[0]
    assert row["name"] == "C101" and bool(row["feasible"]) and row["violations"] == ""
    routes = json.loads(row["routes"])
    checked = verify_instance(read_solomon(data_dir / "solomon100" / "C101.txt"), 0, routes)
    assert checked.feasible and checked.cost == pytest.approx(row["cost"], rel=1e-9)
    assert int(row["num_routes"]) == len(routes)
    # arrays instead of a file: the same problem's fields
    instance = generate("cvrptw", 1, 6, seed=5)
    arrays = {
        "locs": [instance.locs[0].tolist()],
        "demand": [instance.demand[0].tolist()],
        "capacity": [float(instance.capacity[0])],
        "time_windows": [instance.time_windows[0].tolist()],
        "service_time": [instance.service_time[0].tolist()],
    }
    out = model.predict(pd.DataFrame(arrays), params=BUDGET)
    assert bool(out.iloc[0]["feasible"])
    tsp = (
        "NAME : t\nTYPE : TSP\nDIMENSION : 3\nEDGE_WEIGHT_TYPE : EUC_2D\n"
        "NODE_COORD_SECTION\n1 0 0\n2 1 1\n3 0 1\nEOF\n"
    )
    with pytest.raises(Exception, match=r"row 0 \(t\): tsp instance; this model solves cvrptw"):
        model.predict(pd.DataFrame({"instance": [tsp]}), params=BUDGET)
    # no name given: the file's own (Solomon's first line); text that is no instance: one line
    out = model.predict(pd.DataFrame({"instance": [text]}), params=BUDGET)
    assert out.iloc[0]["name"] == "C101"
    # (a ValueError that MLflow's server answers as HTTP 400 in this one line)
    refused = r"^row 0 \(instance0\): field 'instance' = 'not an instance'"
    with pytest.raises(ValueError, match=refused):
        model.predict(pd.DataFrame({"instance": ["not an instance"]}), params=BUDGET)


def test_the_served_model_answers_a_post_with_verified_routes(registered, data_dir) -> None:
    _, uri, _ = registered
    with served_model("models:/linc-smoke/1", {"MLFLOW_TRACKING_URI": uri}) as server:
        text = (data_dir / "solomon100" / "C101.txt").read_text()
        body = {"dataframe_split": {"columns": ["instance", "name"], "data": [[text, "C101"]]}}
        answer = answer_json(f"{server.url}/invocations", body | {"params": BUDGET}, seconds=120)
        prediction = answer["predictions"][0]
        assert prediction["feasible"] is True and prediction["name"] == "C101"
        local = loaded(uri).predict(pd.DataFrame({"instance": [text], "name": ["C101"]}),
                                    params=BUDGET)  # fmt: skip
        assert prediction["cost"] == pytest.approx(float(local.iloc[0]["cost"]), rel=1e-9)


def test_linc_report_registers_a_chosen_run(registered, capsys) -> None:
    _, uri, _ = registered
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("linc-smoke")
    baseline = next(
        r for r in client.search_runs([experiment.experiment_id])
        if r.data.tags.get("variant") == "baseline"
    )  # fmt: skip
    args = ["register", "--tracking-uri", uri, "--run", baseline.info.run_id, "--name", "chosen"]
    assert report_main(args) == 0
    printed = capsys.readouterr()
    assert "as models:/chosen/1" in printed.out
    # MLflow's own lines of a new registration stay off the console (the command prints its own)
    for chatter in ("Successfully registered", "Created version", "Downloading artifacts"):
        assert chatter not in printed.err
    assert client.get_model_version("chosen", "1").tags["variant"] == "baseline"
    # the same command again: the version that holds this checkpoint, no second one
    assert report_main(args) == 0
    assert "as models:/chosen/1" in capsys.readouterr().out
    assert [str(v.version) for v in client.search_model_versions("name='chosen'")] == ["1"]
    # a resumed sweep that ended on a later checkpoint of the run would get a new version
    checkpoint = baseline.data.tags["checkpoint"]
    held = registered_version(client, "chosen", baseline.info.run_id, checkpoint)
    assert held == "1"
    assert registered_version(client, "chosen", baseline.info.run_id, checkpoint + "x") is None
    assert registered_version(client, "other", baseline.info.run_id, checkpoint) is None
    assert report_main(["register", "--tracking-uri", uri, "--run", "nope", "--name", "x"]) == 2
    # a trial of a sweep that never ended has no final checkpoint tag: the line says what to do
    client.delete_tag(baseline.info.run_id, "checkpoint")
    assert report_main(args) == 2
    told = capsys.readouterr().err
    assert f"run {baseline.info.run_id} (FINISHED) has no 'checkpoint' tag: its sweep" in told
    assert "run the sweep's command again" in told
