"""orchestration.tracking.ui_app: ``mlflow ui --app-name linc`` opens an experiment of the
experiments list on linc's runs table, in a real headless Chromium against a real server: an
ablation's trials with their variant and eval_cost, a search's trials by number, the registered
model's page with its usage. ``LINC_UI_SHOTS=FOLDER`` saves a screenshot of each page there."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from faults.servers import MlflowServer
from orchestration.tracking.registry import usage
from orchestration.tracking.store import PARENT_RUN_TAG, ensure_experiment, save_sweep_view
from orchestration.tracking.ui_app import (
    DEFAULT_WORKFLOW_SCRIPT,
    FIRST_VIEW_SCRIPT,
    MODEL_TRAINING,
    WORKFLOW_STORAGE_KEY,
    landing_page,
)

ABLATION = {"full_linc": 612.5, "baseline": 640.25, "no_gate": 618.75, "no_summary": 625.0}
SEARCHED = ((0.000846, 5.85, 540.36), (0.000383, 11.4, 561.41), (7.5e-05, 60.7, 623.47))

MLFLOW_INDEX = (
    '<!doctype html><html><head><title>MLflow</title><script defer="defer" '
    'src="static-files/static/js/main.js"></script></head><body></body></html>'
)


def test_the_default_is_set_before_mlflow_reads_it_and_only_once():
    page = landing_page(MLFLOW_INDEX)
    assert page.index(DEFAULT_WORKFLOW_SCRIPT) < page.index('src="static-files/static/js/main.js"')
    assert page.index(FIRST_VIEW_SCRIPT) < page.index('src="static-files/static/js/main.js"')
    assert page.replace(DEFAULT_WORKFLOW_SCRIPT + FIRST_VIEW_SCRIPT, "") == MLFLOW_INDEX
    assert landing_page(page) == page
    # The value is what MLflow's own toggle stores: JSON of "machine_learning".
    assert f"localStorage.setItem('{WORKFLOW_STORAGE_KEY}',JSON.stringify('{MODEL_TRAINING}'))" in (
        DEFAULT_WORKFLOW_SCRIPT
    )
    assert "localStorage.getItem" in DEFAULT_WORKFLOW_SCRIPT  # a user's own choice is kept
    bare = "<html><head><title>x</title></head></html>"
    assert landing_page(bare).index(DEFAULT_WORKFLOW_SCRIPT) == bare.index("</head>")


def _sweep(client, experiment_id: str, sweep: dict, trials: list[tuple[str, dict, dict]]):
    """A sweep's parent run, its view (as the driver saves it) and its FINISHED trial runs:
    ``(run name, tags, metrics)`` (metrics ``params.KEY``: a param), nested under the parent.
    Returns the last trial's run."""
    save_sweep_view(client, experiment_id, sweep)
    tags = {"sweep": sweep["name"], "kind": "sweep"}
    parent = client.create_run(experiment_id, run_name=sweep["name"], tags=tags).info.run_id
    for name, own_tags, metrics in trials:
        nested = own_tags | {"sweep": sweep["name"], PARENT_RUN_TAG: parent}
        run = client.create_run(experiment_id, run_name=name, tags=nested)
        for key, value in metrics.items():
            if key.startswith("params."):
                client.log_param(run.info.run_id, key.removeprefix("params."), value)
            else:
                client.log_metric(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)
    client.set_terminated(parent)
    return run


@pytest.fixture(scope="module")
def linc_ui(tmp_path_factory):
    """``mlflow server --app-name linc`` on 127.0.0.1 with a linc experiment of two runs, an
    ablation's (``linc-cpu``, its best policy registered with linc's description) and a
    search's (``linc-hpo``)."""
    folder = tmp_path_factory.mktemp("ui")
    with MlflowServer(folder, app_name="linc") as server:
        experiment_id = ensure_experiment(server.uri, "linc-ui")
        client = MlflowClient(tracking_uri=server.uri)
        for name, cost in (("full_linc-seed1", 612.5), ("baseline-seed1", 640.25)):
            run = client.create_run(experiment_id, run_name=name)
            client.log_metric(run.info.run_id, "eval_cost", cost)
            client.set_terminated(run.info.run_id)
        ablation = [
            (f"{variant}-seed1", {"variant": variant, "seed": "1"}, {"eval_cost": cost})
            for variant, cost in ABLATION.items()
        ]
        sweep = {"name": "ablation-cpu", "kind": "ablation"}
        best = _sweep(client, ensure_experiment(server.uri, "linc-cpu"), sweep, ablation[::-1])
        client.create_registered_model("linc-cpu")
        described = usage("linc-cpu", "1", {"variant": "full_linc", "seed": "1"})
        source = f"{best.info.artifact_uri}/policy"
        client.create_model_version("linc-cpu", source, best.info.run_id, description=described)
        search = [
            (
                f"#{n:03d} learning_rate={rate:.3g} tau_start={tau:.3g} full_linc-seed12",
                {"variant": "full_linc", "seed": "12", "optuna.trial_number": str(n)},
                {"validation_cost": cost, "eval_cost": cost - 50}
                | {"params.train.learning_rate": rate, "params.train.tau_start": tau},
            )
            for n, (rate, tau, cost) in enumerate(SEARCHED)
        ]
        space = {"train.learning_rate": {}, "train.tau_start": {}}
        sweep = {"name": "hpo-smoke", "kind": "search", "metric": "validation_cost", "space": space}
        _sweep(client, ensure_experiment(server.uri, "linc-hpo"), sweep, search)
        yield server.uri


def _shot(page, name: str) -> None:
    """A screenshot of ``page`` in ``$LINC_UI_SHOTS`` (what a user sees), when it is set."""
    folder = os.environ.get("LINC_UI_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _click_experiment(browser, address: str, stored_choice: str | None, name: str = "linc-ui"):
    """A new browser profile opens the UI's home page and clicks ``name`` in its experiments
    list; ``stored_choice``: the GenAI/model-training toggle the user set earlier, if any.
    Returns the page after the click."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    if stored_choice is not None:
        context.add_init_script(
            f"localStorage.setItem('{WORKFLOW_STORAGE_KEY}', JSON.stringify('{stored_choice}'))"
        )
    page = context.new_page()
    page.goto(f"{address}/")
    page.get_by_text(name, exact=True).first.click(timeout=60_000)
    return page


def test_a_click_in_the_experiments_list_opens_the_runs_table(linc_ui, chromium):
    page = _click_experiment(chromium, linc_ui, stored_choice=None)
    try:
        page.wait_for_url(re.compile(r"#/experiments/\d+/runs"), timeout=60_000)
        assert "workflowType=machine_learning" in page.url
        # The runs table, with both runs in it (the parent-less runs are rows of their own).
        page.get_by_text("full_linc-seed1", exact=True).wait_for(timeout=60_000)
        page.get_by_text("baseline-seed1", exact=True).wait_for(timeout=60_000)
        stored = page.evaluate(f"localStorage.getItem('{WORKFLOW_STORAGE_KEY}')")
        assert stored == f'"{MODEL_TRAINING}"'
    finally:
        page.context.close()


def test_a_user_who_chose_genai_keeps_the_choice(linc_ui, chromium):
    page = _click_experiment(chromium, linc_ui, stored_choice="genai")
    try:
        page.wait_for_url(re.compile(r"workflowType=genai"), timeout=60_000)
        assert "/runs" not in page.url
    finally:
        page.context.close()


def test_an_ablations_experiment_opens_on_its_trials_with_variant_and_eval_cost(linc_ui, chromium):
    page = _click_experiment(chromium, linc_ui, stored_choice=None, name="linc-cpu")
    try:
        # the experiment's latest sweep's view (its trials only; all sweeps': the Views menu)
        page.wait_for_url(re.compile(r"viewStateShareKey=sweep-ablation-cpu"), timeout=60_000)
        # every trial a row of its own (not folded under the parent), lowest eval_cost first
        for variant in ABLATION:
            page.get_by_text(f"{variant}-seed1", exact=True).wait_for(timeout=60_000)
        for column in ("variant", "eval_cost", "sweep"):
            page.get_by_text(column, exact=True).first.wait_for(timeout=30_000)
        page.get_by_text("612.5", exact=True).first.wait_for(timeout=30_000)
        page.get_by_text("no_gate", exact=True).first.wait_for(timeout=30_000)  # variant cell
        _shot(page, "1-ablation-experiment")
        # the sweep's own view is in the Views menu
        page.get_by_test_id("saved-views-trigger").click(timeout=30_000)
        page.get_by_text("linc: every trial", exact=True).wait_for(timeout=30_000)
        _shot(page, "2-views-menu")
    finally:
        page.context.close()


def test_a_searchs_experiment_shows_its_trials_by_number(linc_ui, chromium):
    page = _click_experiment(chromium, linc_ui, stored_choice=None, name="linc-hpo")
    try:
        page.wait_for_url(re.compile(r"viewStateShareKey=sweep-hpo-smoke"), timeout=60_000)
        for number in range(len(SEARCHED)):  # names differ in their first characters
            page.get_by_text(re.compile(f"^#{number:03d} learning_rate=")).wait_for(timeout=60_000)
        for column in ("optuna.trial_number", "train.learning_rate", "validation_cost"):
            page.get_by_text(column, exact=True).first.wait_for(timeout=30_000)
        _shot(page, "3-search-experiment")
    finally:
        page.context.close()


def test_a_first_visit_whose_address_has_mlflows_default_facets_still_opens_the_view(
    linc_ui, chromium
):
    """MLflow can write its default facets over linc's redirect (read from the address before
    it): the page lands where this test starts, and linc opens the view again, without them."""
    experiment_id = MlflowClient(tracking_uri=linc_ui).get_experiment_by_name("linc-hpo")
    defaults = (
        "workflowType=machine_learning&searchFilter=&orderByKey=attributes.start_time"
        "&orderByAsc=false&startTime=ALL&lifecycleFilter=Active&modelVersionFilter=All+Runs"
    )
    context = chromium.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{linc_ui}/#/experiments/{experiment_id.experiment_id}/runs?{defaults}")
        page.wait_for_url(re.compile(r"viewStateShareKey=sweep-hpo-smoke"), timeout=60_000)
        # applied: the trials flat (not folded under their parent), the search's sort
        page.get_by_text(re.compile(r"^#000 learning_rate=")).wait_for(timeout=60_000)
        page.wait_for_url(re.compile(r"orderByKey=metrics.%60validation_cost%60"), timeout=30_000)
        key = f"linc.viewOpened.{experiment_id.experiment_id}"
        page.wait_for_function(f"localStorage.getItem('{key}') === '1'", timeout=30_000)
    finally:
        context.close()


def test_the_model_version_page_says_how_to_load_the_model(linc_ui, chromium):
    context = chromium.new_context(viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        page.goto(f"{linc_ui}/#/models/linc-cpu/versions/1")
        call = 'model = mlflow.pyfunc.load_model("models:/linc-cpu/1")'
        page.get_by_text(call).first.wait_for(timeout=60_000)
        page.get_by_text("mlflow models serve -m models:/linc-cpu/1", exact=False).first.wait_for(
            timeout=30_000
        )
        _shot(page, "4-model-version")
    finally:
        context.close()
