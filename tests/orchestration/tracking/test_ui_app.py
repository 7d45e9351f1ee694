"""orchestration.tracking.ui_app: ``mlflow ui --app-name linc`` opens an experiment of the
experiments list on its runs table, in a real headless Chromium against a real server."""

from __future__ import annotations

import re

import pytest
from mlflow.tracking import MlflowClient

from faults.servers import MlflowServer
from orchestration.tracking.store import ensure_experiment
from orchestration.tracking.ui_app import (
    DEFAULT_WORKFLOW_SCRIPT,
    MODEL_TRAINING,
    WORKFLOW_STORAGE_KEY,
    landing_page,
)

MLFLOW_INDEX = (
    '<!doctype html><html><head><title>MLflow</title><script defer="defer" '
    'src="static-files/static/js/main.js"></script></head><body></body></html>'
)


def test_the_default_is_set_before_mlflow_reads_it_and_only_once():
    page = landing_page(MLFLOW_INDEX)
    assert page.index(DEFAULT_WORKFLOW_SCRIPT) < page.index('src="static-files/static/js/main.js"')
    assert page.replace(DEFAULT_WORKFLOW_SCRIPT, "") == MLFLOW_INDEX
    assert landing_page(page) == page
    # The value is what MLflow's own toggle stores: JSON of "machine_learning".
    assert f"localStorage.setItem('{WORKFLOW_STORAGE_KEY}',JSON.stringify('{MODEL_TRAINING}'))" in (
        DEFAULT_WORKFLOW_SCRIPT
    )
    assert "localStorage.getItem" in DEFAULT_WORKFLOW_SCRIPT  # a user's own choice is kept
    bare = "<html><head><title>x</title></head></html>"
    assert landing_page(bare).index(DEFAULT_WORKFLOW_SCRIPT) == bare.index("</head>")


@pytest.fixture(scope="module")
def linc_ui(tmp_path_factory):
    """``mlflow server --app-name linc`` on 127.0.0.1 with one linc experiment and two runs."""
    folder = tmp_path_factory.mktemp("ui")
    with MlflowServer(folder, app_name="linc") as server:
        experiment_id = ensure_experiment(server.uri, "linc-ui")
        client = MlflowClient(tracking_uri=server.uri)
        for name, cost in (("full_linc-seed1", 612.5), ("baseline-seed1", 640.25)):
            run = client.create_run(experiment_id, run_name=name)
            client.log_metric(run.info.run_id, "eval_cost", cost)
            client.set_terminated(run.info.run_id)
        yield server.uri


def _click_experiment(browser, address: str, stored_choice: str | None):
    """A new browser profile opens the UI's home page and clicks ``linc-ui`` in its experiments
    list; ``stored_choice``: the GenAI/model-training toggle the user set earlier, if any.
    Returns the page after the click."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    if stored_choice is not None:
        context.add_init_script(
            f"localStorage.setItem('{WORKFLOW_STORAGE_KEY}', JSON.stringify('{stored_choice}'))"
        )
    page = context.new_page()
    page.goto(f"{address}/")
    page.get_by_text("linc-ui", exact=True).first.click(timeout=60_000)
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
