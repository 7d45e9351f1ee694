"""orchestration.tracking.ui_app: ``mlflow ui --app-name linc`` opens an experiment of the
experiments list on linc's runs table, in a real headless Chromium against a real server: an
ablation's trials with their variant and eval_cost, a search's trials by number, the registered
model's page with its usage. ``LINC_UI_SHOTS=FOLDER`` saves a screenshot of each page there."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from mlflow.tracking import MlflowClient

from faults.servers import MlflowServer
from linc_core.utils.typed import ConfigError
from orchestration.tracking.registry import usage
from orchestration.tracking.store import PARENT_RUN_TAG, ensure_experiment, save_sweep_view
from orchestration.tracking.ui_app import (
    DEFAULT_WORKFLOW_SCRIPT,
    FIRST_VIEW_SCRIPT,
    MODEL_TRAINING,
    WORKFLOW_STORAGE_KEY,
    auth_lock_folder,
    auth_lock_path,
    auth_store_lock,
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


# ------------------------------------------------------------------------------------------------
# linc-auth's lock of its user store (issue: /tmp/linc-auth-<sha256 of the URI>.lock: the name
# was a hash of the database password that anyone could check against a dictionary, and anyone
# could make that file first and hold it, so that linc-auth never started)

AUTH_PASSWORD = "Tr0ub4dor&3-auth"


@pytest.fixture
def lock_home(tmp_path, monkeypatch) -> Path:
    """A runtime folder of this test's own; no auth config named."""
    monkeypatch.delenv("MLFLOW_AUTH_CONFIG_PATH", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    return tmp_path / "run"


def _uri_variants(password: str) -> list[str]:
    return [
        f"postgresql://mlflow:{password}@db:5432/mlflow_auth",
        f"postgresql+psycopg2://mlflow:{quote(password, safe='')}@db:5432/mlflow_auth",
        f"postgresql://mlflow:{password}@db/mlflow_auth?sslmode=require",
    ]


def test_the_lock_of_the_user_store_reveals_no_hash_of_its_password(lock_home) -> None:
    for password in (AUTH_PASSWORD, "p@ss/w'rd with space", "%41bc:def@@"):
        for uri in _uri_variants(password):
            path = auth_lock_path(uri)
            name = str(path)
            assert password not in name and quote(password, safe="") not in name
            for secret in (uri, password, quote(password, safe="")):
                digest = hashlib.sha256(secret.encode()).hexdigest()
                for width in (8, 12, 16, 64):
                    assert digest[:width] not in name, (uri, width)
            # private: not the shared temporary folder, a folder only this user can enter
            assert path.parent == lock_home / "linc"
            assert path.parent != Path(tempfile.gettempdir())
            assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # one lock per store, whatever its password: the password does not make another store
    first, second = _uri_variants(AUTH_PASSWORD)[0], _uri_variants("other-pass-1")[0]
    assert auth_lock_path(first) == auth_lock_path(second)
    assert auth_lock_path(first) != auth_lock_path(first.replace("mlflow_auth", "users"))


def test_the_lock_serialises_the_workers_of_one_store(lock_home) -> None:
    uri = _uri_variants(AUTH_PASSWORD)[0]
    first, second = auth_store_lock(uri), auth_store_lock(uri)
    try:
        path = auth_lock_path(uri)
        info = path.lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):  # the other worker waits
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(first)
        os.close(second)


def _refused(uri: str, path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        os.close(auth_store_lock(uri))
    line = str(caught.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and AUTH_PASSWORD not in line
    return line


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_lock_another_user_made_first_is_refused(lock_home) -> None:
    uri = _uri_variants(AUTH_PASSWORD)[0]
    path = auth_lock_path(uri)
    path.touch(mode=0o600)
    os.chown(path, 65534, 65534)
    assert "not a file of user id 0 (owner 65534)" in _refused(uri, path)


def test_a_link_or_a_fifo_in_place_of_the_lock_is_refused(lock_home, tmp_path) -> None:
    uri = _uri_variants(AUTH_PASSWORD)[0]
    path = auth_lock_path(uri)
    target = tmp_path / "elsewhere"
    path.symlink_to(target)  # a dangling link: O_CREAT would have made the target
    _refused(uri, path)
    assert not target.exists()
    target.write_text("keep")
    _refused(uri, path)  # a link to an existing file
    assert target.read_text() == "keep"
    path.unlink()
    os.mkfifo(path, 0o600)
    assert "is not a file" in _refused(uri, path)


def test_a_lock_folder_that_is_not_private_is_refused(lock_home, tmp_path) -> None:
    folder = lock_home / "linc"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    folder.symlink_to(shared)  # a link to a folder others can write
    with pytest.raises(ConfigError, match=r"linc: the folder of the user store's lock is a link"):
        auth_lock_folder()
    folder.unlink()
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        auth_lock_folder()
    if os.getuid() == 0:
        folder.chmod(0o700)
        os.chown(folder, 65534, 65534)
        with pytest.raises(ConfigError, match="another user's"):
            auth_lock_folder()


def test_the_lock_lives_beside_a_private_auth_config(lock_home, tmp_path, monkeypatch) -> None:
    """linc's server writes the auth config (the store's password in it) into a private folder
    of its own: the lock goes there; a config in a folder others can write is not followed."""
    private = tmp_path / "config"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(private / "basic_auth.ini"))
    assert auth_lock_folder() == private
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(shared / "basic_auth.ini"))
    assert auth_lock_folder() == lock_home / "linc"


def test_linc_auth_stops_in_one_line_on_a_lock_not_safely_its_own(tmp_path) -> None:
    """The server's worker, not a traceback: ``linc-auth: <folder>: ...`` and exit status 1."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # the config in a folder others can write: not where the lock goes
    config = shared / "basic_auth.ini"
    database = f"sqlite:///{tmp_path / 'auth.db'}"
    config.write_text(f"[mlflow]\ndefault_permission = NO_PERMISSIONS\ndatabase_uri = {database}\n")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "linc").symlink_to(shared)
    env = os.environ | {"MLFLOW_AUTH_CONFIG_PATH": str(config), "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from orchestration.tracking.ui_app import create_auth_app\ncreate_auth_app()",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("linc-auth: ")]
    assert line.startswith(f"linc-auth: {runtime / 'linc'}: the folder of the user store's lock")
    assert not list(shared.glob("*.lock"))
