"""``mlflow ui --app-name linc``: MLflow's own tracking server and UI, opening on the runs table;
``mlflow server --app-name linc-auth``: the same with MLflow's basic authentication.

MLflow 3.17's UI chooses between its GenAI pages and its model-training pages in the browser
alone: a toggle remembered in the browser's local storage (``mlflow.workflowType_v1``), GenAI
until switched, and carried in every link of the experiments list. The experiment's kind tag is
not read. So a researcher opening a fresh browser on linc's runs and clicking an experiment lands
on a GenAI traces overview that has nothing in it. This app is MLflow's server (the same routes,
the same ASGI wrapper) whose landing page sets the toggle to model training in a browser that has
never chosen; a browser whose user chose keeps the choice. It is registered under MLflow's
``mlflow.app`` entry points (pyproject.toml), the way ``--app-name basic-auth`` is.

MLflow starts one app per server, so ``basic-auth`` and ``linc`` cannot be named together:
``linc-auth`` is MLflow's ``basic-auth`` app itself (its login, users, permissions and checks on
every route, configured by ``MLFLOW_AUTH_CONFIG_PATH``) built on the Flask app that serves linc's
landing page. The landing page asks for a login like every other route.
"""

from __future__ import annotations

WORKFLOW_STORAGE_KEY = "mlflow.workflowType_v1"
MODEL_TRAINING = "machine_learning"
# Runs before MLflow's bundle reads the toggle; a browser without local storage is left alone.
_KEY, _VALUE = repr(WORKFLOW_STORAGE_KEY), repr(MODEL_TRAINING)
DEFAULT_WORKFLOW_SCRIPT = (
    f"<script>try{{if(localStorage.getItem({_KEY})===null)"
    f"localStorage.setItem({_KEY},JSON.stringify({_VALUE}))}}catch(e){{}}</script>"
)


def landing_page(html: str) -> str:
    """MLflow's ``index.html`` with :data:`DEFAULT_WORKFLOW_SCRIPT` ahead of its first script
    (or at the end of its head); unchanged if already there."""
    if DEFAULT_WORKFLOW_SCRIPT in html:
        return html
    at = html.find("<script")
    if at < 0:
        at = html.find("</head>")
    if at < 0:
        return DEFAULT_WORKFLOW_SCRIPT + html
    return html[:at] + DEFAULT_WORKFLOW_SCRIPT + html[at:]


def _flask_app_with_landing():
    """MLflow's Flask app, its landing view serving :func:`landing_page`."""
    from pathlib import Path

    from flask import Response
    from mlflow.server import app

    serve_mlflow_page = app.view_functions["serve"]
    index = Path(app.static_folder) / "index.html"

    def serve():
        if not index.exists():  # a source install without the built UI: MLflow's own message
            return serve_mlflow_page()
        page = landing_page(index.read_text(encoding="utf-8"))
        return Response(page, mimetype="text/html", headers={"Cache-Control": "no-cache"})

    app.view_functions["serve"] = serve
    return app


def create_app():
    """The app ``mlflow server``/``mlflow ui`` start for ``--app-name linc``: MLflow's Flask app
    with its landing page from :func:`landing_page`, wrapped in MLflow's FastAPI app when the
    server is uvicorn (MLflow's default), as MLflow's own ``basic-auth`` app does."""
    from mlflow.environment_variables import _MLFLOW_SGI_NAME

    app = _flask_app_with_landing()
    if _MLFLOW_SGI_NAME.get() == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(app)
    return app


def create_auth_app():
    """The app for ``--app-name linc-auth``: MLflow's ``basic-auth`` app (``create_app`` of
    ``mlflow.server.auth``) over :func:`_flask_app_with_landing`.

    ``mlflow server`` prepares the user store once before its workers start only for the app
    named ``basic-auth``; here every worker does it, one at a time (a lock file per user store),
    so that concurrent workers do not create the same tables or admin together.
    """
    import fcntl
    import hashlib
    import os
    import tempfile

    from mlflow.server.auth import auth_config
    from mlflow.server.auth import create_app as create_basic_auth_app

    app = _flask_app_with_landing()
    store_key = hashlib.sha256(auth_config.database_uri.encode()).hexdigest()[:16]
    lock = os.open(
        os.path.join(tempfile.gettempdir(), f"linc-auth-{store_key}.lock"),
        os.O_RDONLY | os.O_CREAT,
        0o600,
    )
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return create_basic_auth_app(app)
    finally:
        os.close(lock)
