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
# # From a sweep to a served model
#
# The platform's path, end to end, at the smallest scale that runs it whole (about three
# minutes on a laptop):
#
# 1. a hyper-parameter search with `linc-hpo`: Optuna in a persistent study, Ray Tune trials,
#    every trial tracked in MLflow, the best policy registered;
# 2. the runs in MLflow, from Python and in the UI;
# 3. the Optuna study;
# 4. the registered model loaded in Python;
# 5. the same model served over HTTP, answering a request.
#
# The commands are the ones you would type in a shell; here Python runs them so the notebook
# executes from top to bottom. Everything is written to a fresh temporary folder.

# %%
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import mlflow
import optuna
from mlflow.tracking import MlflowClient

from linc_core.instances.benchmarks import data_dir

bin_dir = Path(sys.executable).parent  # the virtual environment's commands
work = Path(tempfile.mkdtemp(prefix="linc-tutorial-"))
store = f"sqlite:///{work / 'mlflow.db'}"


def run(*command: str) -> str:
    """Run a command, show the last lines it printed, fail if it failed."""
    done = subprocess.run(command, capture_output=True, text=True, cwd=work)
    print("\n".join(done.stdout.strip().splitlines()[-12:]))
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed:\n{done.stderr[-2000:]}")
    return done.stdout


# %% [markdown]
# ## 1. A search
#
# `preset=smoke` is a tiny model on 6-customer instances (seconds a trial). The search space
# (`search.space`) defaults to the learning rate and the soft top-1 start temperature; the
# objective is `validation_cost`. `tracking.register` names the model the best trial is
# registered under. In a shell this is one line:
#
# ```bash
# .venv/bin/linc-hpo preset=smoke search.num_samples=4 \
#     cluster.storage=runs tracking.register=linc-tutorial
# ```

# %%
output = run(
    str(bin_dir / "linc-hpo"),
    "preset=smoke",
    "search.num_samples=4",
    f"cluster.storage={work / 'storage'}",
    f"tracking.uri={store}",
    "tracking.register=linc-tutorial",
)

# %% [markdown]
# ## 2. The runs in MLflow
#
# The search is one parent run; each trial is a run nested under it, with the settings it ran
# (its effective settings, not the command line) as params and its metrics per epoch.

# %%
client = MlflowClient(tracking_uri=store)
experiment = client.get_experiment_by_name("linc-smoke")
runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
for found in runs:
    params, metrics = found.data.params, found.data.metrics
    print(
        f"{found.info.run_name:<40} {found.info.status:<9}"
        f" lr={params.get('train.learning_rate', '-'):<22}"
        f" validation_cost={metrics.get('validation_cost', float('nan')):.3f}"
    )

# %% [markdown]
# The UI shows the same runs: `mlflow ui --app-name linc` is MLflow's own UI, opening on the
# runs table. The search printed the command; started here on a free port, it answers:


# %%
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop(server: subprocess.Popen) -> None:
    """Stop a server and the processes it started (its own process group)."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)


def wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


ui_port = free_port()
ui = subprocess.Popen(
    [str(bin_dir / "mlflow"), "ui", "--app-name", "linc", "--backend-store-uri", store,
     "--host", "127.0.0.1", "--port", str(ui_port)],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
)  # fmt: skip
try:
    wait_for(f"http://127.0.0.1:{ui_port}/health")
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/", timeout=10) as page:
        print(page.status, "MLflow UI at", f"http://127.0.0.1:{ui_port}/")
finally:
    stop(ui)

# %% [markdown]
# ## 3. The Optuna study
#
# The study lives in an SQLite file beside the tracking store (`search.storage` names another,
# e.g. PostgreSQL): re-running the search resumes it, and a larger `search.num_samples` adds
# only the missing trials. `optuna-dashboard` opens the same storage.

# %%
study = optuna.load_study(study_name="hpo-smoke", storage=f"sqlite:///{work / 'optuna.db'}")
for trial in study.trials:
    print(trial.number, trial.state.name, trial.value, trial.params)
print("best:", study.best_trial.params, round(study.best_value, 3))

# %% [markdown]
# ## 4. The registered model
#
# The best trial's policy is a registered MLflow model: its checkpoint and `linc_core` as its
# code. It takes a benchmark file's text (or arrays) and returns verified routes.

# %%
mlflow.set_tracking_uri(store)
model = mlflow.pyfunc.load_model("models:/linc-tutorial/1")
c101 = (data_dir() / "solomon100" / "C101.txt").read_text()
answer = model.predict({"instance": [c101]}, params={"num_z": 16, "augment": 8})
print(answer[["name", "cost", "feasible", "num_routes"]].to_string(index=False))

# %% [markdown]
# ## 5. The served model
#
# `mlflow models serve` puts the same model behind HTTP, on 127.0.0.1. Requests have bounds
# (size, customers, rows, decoding budget, a deadline: see *Security and serving limits*); a
# request past them is answered 400 in one line.
#
# ```bash
# source .venv/bin/activate   # mlflow starts uvicorn by name: it must be on PATH
# MLFLOW_TRACKING_URI=sqlite:///$PWD/runs/mlflow.db mlflow models serve \
#     -m models:/linc-tutorial/1 --env-manager local -h 127.0.0.1 -p 5001
# ```

# %%
serve_port = free_port()
server = subprocess.Popen(
    [str(bin_dir / "mlflow"), "models", "serve", "-m", "models:/linc-tutorial/1",
     "--env-manager", "local", "-h", "127.0.0.1", "-p", str(serve_port)],
    # MLflow starts uvicorn by name: the environment's commands must be on PATH
    env={**os.environ, "MLFLOW_TRACKING_URI": store, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
)  # fmt: skip
try:
    wait_for(f"http://127.0.0.1:{serve_port}/ping")
    body = {
        "dataframe_split": {"columns": ["instance"], "data": [[c101]]},
        "params": {"num_z": 16, "augment": 8},
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{serve_port}/invocations",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        served = json.loads(response.read())
finally:
    stop(server)
row = served["predictions"][0]
print({key: row[key] for key in ("name", "cost", "feasible", "num_routes")})
assert row["feasible"]
