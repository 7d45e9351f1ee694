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

The landing page also opens linc's view of an experiment's runs table the first time a browser
opens that experiment (:data:`FIRST_VIEW_SCRIPT`), as its share link would: the view of the
experiment's latest sweep (tag ``linc.view``; :func:`~orchestration.tracking.store.sweep_view`:
an ablation's trials with variant, seed and metrics, lowest ``eval_cost`` first; a search's by
trial number, searched values and objectives, best first), else ``linc-runs`` (every trial of
every sweep). Every run is in the charts (the reference and the baseline too, not the UI's
first ten). What a user changes is then MLflow's to keep; the other views are in the UI's
Views menu. What a server-side app cannot decide in MLflow
3.17: the UI's default table (kept in the browser, per user: so linc's view is applied once per
browser and experiment), trial rows nested under an expanded parent (a saved view leaves
``runsExpanded`` out, and MLflow nests only when sorted by start time: linc's views list trials
flat with their sweep in a column), the rounding of numbers and the colours of runs.

MLflow starts one app per server, so ``basic-auth`` and ``linc`` cannot be named together:
``linc-auth`` is MLflow's ``basic-auth`` app itself (its login, users, permissions and checks on
every route, configured by ``MLFLOW_AUTH_CONFIG_PATH``) built on the Flask app that serves linc's
landing page. The landing page asks for a login like every other route.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from linc_core.utils.secrets import redact
from linc_core.utils.typed import ConfigError

WORKFLOW_STORAGE_KEY = "mlflow.workflowType_v1"
MODEL_TRAINING = "machine_learning"
# Runs before MLflow's bundle reads the toggle; a browser without local storage is left alone.
_KEY, _VALUE = repr(WORKFLOW_STORAGE_KEY), repr(MODEL_TRAINING)
DEFAULT_WORKFLOW_SCRIPT = (
    f"<script>try{{if(localStorage.getItem({_KEY})===null)"
    f"localStorage.setItem({_KEY},JSON.stringify({_VALUE}))}}catch(e){{}}</script>"
)


# The first time this browser opens an experiment's runs page in model-training mode without a
# view in its address, and the experiment has linc's saved view, open that view instead (its
# share link). MLflow's router moves by history.pushState (no hashchange): both are watched.
# MLflow applies a share link only to an address without its search facets (VIEW_FACETS), so
# those are dropped from the redirect. The experiment counts as opened once MLflow has applied
# the view (share key and facets in the address together), not when linc redirects: MLflow can
# write its default facets over the redirect from a location it read before it (a race seen on
# a loaded machine), and the view is then opened again (at most three redirects a page load).
# The redirect is built from the address when the experiment's tags arrive, and skipped if the
# user has left that experiment's runs page by then.
VIEW_FACETS = (
    "searchFilter",
    "orderByKey",
    "orderByAsc",
    "startTime",
    "lifecycleFilter",
    "modelVersionFilter",
    "datasetsFilter",
)
_FACETS = "[" + ",".join(f"'{facet}'" for facet in VIEW_FACETS) + "]"
FIRST_VIEW_SCRIPT = (
    "<script>(function(){var V='linc-runs',S='linc.viewOpened.',F=" + _FACETS + ",busy={},"
    "tries={};function at(){var m=location.hash.match("
    "/^#\\/experiments\\/(\\d+)(\\/runs)?\\/?(\\?.*)?$/);"
    "return m&&{id:m[1],q:new URLSearchParams((m[3]||'').slice(1))}}"
    "function linc(){var a=at();if(!a)return;var q=a.q,w=q.get('workflowType'),id=a.id;"
    "if(w&&w!==" + _VALUE + ")return;if(q.has('viewStateShareKey')){"
    "if(F.some(function(k){return q.has(k)}))try{localStorage.setItem(S+id,'1')}catch(e){}"
    "return}try{if(!w&&localStorage.getItem(" + _KEY + ")!==JSON.stringify(" + _VALUE + "))"
    "return;if(localStorage.getItem(S+id))return}catch(e){return}"
    "if(busy[id]||(tries[id]=(tries[id]||0)+1)>3)return;busy[id]=1;"
    "fetch('ajax-api/2.0/mlflow/experiments/get?experiment_id='+id).then(function(r){"
    "return r.json()}).then(function(d){busy[id]=0;var t={};"
    "((d.experiment&&d.experiment.tags)||[]).forEach(function(x){t[x.key]=x.value});"
    "var v=t['linc.view'];if(!v||!t['mlflow.sharedViewState.'+v])v=V;"
    "if(!t['mlflow.sharedViewState.'+v])return;var now=at();"
    "if(!now||now.id!==id||now.q.has('viewStateShareKey'))return;q=now.q;"
    "if(q.get('workflowType')&&q.get('workflowType')!==" + _VALUE + ")return;"
    "F.forEach(function(k){q.delete(k)});q.set('viewStateShareKey',v);"
    "if(!q.has('workflowType'))q.set('workflowType'," + _VALUE + ");"
    "location.replace('#/experiments/'+id+'/runs?'+q.toString())})"
    ".catch(function(){busy[id]=0})};"
    "['pushState','replaceState'].forEach(function(n){var f=history[n];"
    "history[n]=function(){var r=f.apply(this,arguments);setTimeout(linc,0);return r}});"
    "window.addEventListener('hashchange',linc);linc()})()</script>"
)
LANDING_SCRIPTS = DEFAULT_WORKFLOW_SCRIPT + FIRST_VIEW_SCRIPT


def landing_page(html: str) -> str:
    """MLflow's ``index.html`` with :data:`DEFAULT_WORKFLOW_SCRIPT` and
    :data:`FIRST_VIEW_SCRIPT` ahead of its first script (or at the end of its head); unchanged
    if already there."""
    if LANDING_SCRIPTS in html:
        return html
    at = html.find("<script")
    if at < 0:
        at = html.find("</head>")
    if at < 0:
        return LANDING_SCRIPTS + html
    return html[:at] + LANDING_SCRIPTS + html[at:]


def _flask_app_with_landing():
    """MLflow's Flask app, its landing view serving :func:`landing_page`."""
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
    named ``basic-auth``; here every worker does it, one at a time (a lock file per user store,
    :func:`auth_store_lock`), so that concurrent workers do not create the same tables or admin
    together. A lock that is not safely ours stops the worker in one line.
    """
    import fcntl

    from mlflow.server.auth import auth_config
    from mlflow.server.auth import create_app as create_basic_auth_app

    app = _flask_app_with_landing()
    try:
        lock = auth_store_lock(auth_config.database_uri)
    except ConfigError as err:
        raise SystemExit(f"linc-auth: {err}") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return create_basic_auth_app(app)
    finally:
        os.close(lock)


def auth_lock_folder() -> Path:
    """Where the user store's lock lives: a folder only this user can write. The folder of the
    auth config (``MLFLOW_AUTH_CONFIG_PATH``, which holds the store's password and so is private
    where linc's server writes it), else ``$XDG_RUNTIME_DIR/linc``, else ``~/.cache/linc``
    (made ``0700``). Never a shared folder such as ``/tmp``: there anyone could make the lock
    first and hold it, and linc-auth would never start.

    Raises:
        ConfigError: the folder cannot be made, or is a link, another user's or writable by
            others.
    """
    config = os.environ.get("MLFLOW_AUTH_CONFIG_PATH")
    if config and _is_private(folder := Path(config).absolute().parent):
        return folder
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = (Path(runtime) if runtime else Path.home() / ".cache") / "linc"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            f"{folder}: cannot make the folder of the user store's lock ({err.strerror}); set "
            "XDG_RUNTIME_DIR to a folder of yours"
        ) from None
    if not _is_private(folder):
        raise ConfigError(
            f"{folder}: the folder of the user store's lock is a link, another user's or "
            "writable by others; remove it (a private one is made) or set XDG_RUNTIME_DIR"
        )
    return folder


def auth_lock_path(database_uri: str) -> Path:
    """The lock file of the user store at ``database_uri``: named from the URI with its
    password masked (:func:`~linc_core.utils.secrets.redact`), so neither the name nor its hash
    reveals the password, in :func:`auth_lock_folder`."""
    store_key = hashlib.sha256(redact(database_uri).encode()).hexdigest()[:16]
    return auth_lock_folder() / f"linc-auth-{store_key}.lock"


def auth_store_lock(database_uri: str) -> int:
    """An open descriptor of :func:`auth_lock_path` (made ``0600`` if absent), for ``flock``.

    Raises:
        ConfigError: the lock file is a link, not a file, or another user's.
    """
    path = auth_lock_path(database_uri)
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as err:  # ELOOP: a symbolic link put in its place
        raise ConfigError(
            f"{path}: cannot open the lock of linc-auth's user store ({err.strerror}); remove "
            "it (it is made again)"
        ) from None
    info = os.fstat(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        os.close(descriptor)
        raise ConfigError(
            f"{path}: the lock of linc-auth's user store is not a file of user id "
            f"{os.getuid()} (owner {info.st_uid}); remove it (it is made again)"
        )
    return descriptor


def _is_private(folder: Path) -> bool:
    """Whether ``folder`` is a real folder (no link) of this user that nobody else can write."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )
