"""The search's Optuna study: where it lives, how Tune's trials end in it, how far it got.

The study is kept in an RDB storage (``search.storage``, any SQLAlchemy URL; default: a SQLite
file ``optuna.db`` beside the sweep's SQLite tracking store, else in the local storage folder)
under the search's name, so that ``optuna.load_study(study_name=NAME, storage=URL)`` opens it
with every trial, its values, its state and its params, optuna-dashboard shows it, and a
re-run of the same search continues it (:mod:`orchestration.experiment.search`). Tune's
``OptunaSearch`` writes it from the driver; :class:`SweepOptunaSearch` ends a trial that the
scheduler stopped early as PRUNED (Tune's own would call it COMPLETE with its last value).

A study trial and its MLflow run name each other: the searcher hands every trial it suggests
its study number (``tracking.trial_number`` in the trial's config: the run's name starts with
it, the run is tagged ``optuna.trial_number`` and ``optuna.study``, the trial's folder is
numbered by it) and records Tune's trial id in the study trial (user attr ``tune_trial_id``);
when the trial ends, the driver's :data:`RUN_FINDERS` give its run's id, recorded in the study
trial as ``mlflow_run_id``. The study names its objectives (``set_metric_names``): the
dashboard's axes are ``validation_cost``, ``seconds``, not ``0``, ``1``.

Tune pickles the searcher, and with it the study's storage, into its saved state (``tuner.pkl``,
``searcher-state-*.pkl``): :class:`MaskedRDBStorage` pickles its URL masked
(``postgresql://linc:***@db/optuna``) and, unpickled in a driver that opened the same study
(a re-run restoring the search), takes the real URL back from :func:`rdb_storage`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from ray.tune.search.optuna import OptunaSearch

from linc_core.utils.secrets import redact
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import ConfigError
from orchestration.config.sweep_sections import SearchSpec

STUDY_FILE = "optuna.db"
TUNE_TRIAL_ATTR = "tune_trial_id"  # a study trial's user attr: its Tune trial's id
MLFLOW_RUN_ATTR = "mlflow_run_id"  # a study trial's user attr: its MLflow run's id
# Study name -> the driver's lookup of a Tune trial's MLflow run id (None: not found). Kept out
# of the searcher: Tune pickles the searcher, and a tracking store's URI may hold a password.
RUN_FINDERS: dict[str, Callable[[str], str | None]] = {}
# The real URL of each masked one this process opened (what an unpickled storage reconnects to).
_REAL_URLS: dict[str, str] = {}


def study_storage_url(spec: SearchSpec, tracking_uri: str, storage: str) -> str:
    """The study's SQLAlchemy URL: ``search.storage``, else a SQLite file beside a SQLite
    tracking store, else in the local Tune storage folder.

    Raises:
        ConfigError: no ``search.storage`` while the tracking store is a server and the
            storage remote (there is no local folder to keep the study in).
    """
    if spec.storage:
        return spec.storage
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
        return f"sqlite:///{folder / STUDY_FILE}"
    if "://" not in storage:
        return f"sqlite:///{Path(storage).resolve() / STUDY_FILE}"
    raise ConfigError(
        f"search.storage: required when the tracking store is a server ({redact(tracking_uri)}) "
        f"and cluster.storage is remote ({redact(storage)}); give a database URL "
        "(postgresql://...)"
    )


class MaskedRDBStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose pickled state holds its URL masked (see the module
    docstring); unpickled where the real URL is unknown, it keeps the masked one (and fails to
    connect, naming no secret)."""

    def __getstate__(self) -> dict[Any, Any]:
        return super().__getstate__() | {"url": redact(self.url)}

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state | {"url": _REAL_URLS.get(state["url"], state["url"])})


def rdb_storage(url: str) -> MaskedRDBStorage:
    """Optuna's RDB storage at ``url`` (tables created if missing)."""
    _REAL_URLS[redact(url)] = url
    return MaskedRDBStorage(url)


def open_study(spec: SearchSpec, url: str, quiet: bool = True) -> Any:
    """The search's study (created if missing) with its objectives' directions; ``quiet``:
    without Optuna's INFO lines (the console reports the trials)."""
    if quiet:  # Optuna sets its logger's level when it is first used: after prepare_console
        optuna.logging.set_verbosity(optuna.logging.WARNING)

    directions = ["minimize" if mode == "min" else "maximize" for mode in spec.modes]
    study = optuna.create_study(
        storage=rdb_storage(url),
        study_name=spec.name,
        directions=directions,
        load_if_exists=True,
    )
    if study.metric_names != list(spec.metrics):
        with warnings.catch_warnings():  # set_metric_names is "experimental" in Optuna 5
            warnings.simplefilter("ignore")
            study.set_metric_names(list(spec.metrics))
    return study


def finished_trials(study: Any) -> int:
    """Trials of the study that ended: complete, pruned or failed (not running or waiting)."""
    from optuna.trial import TrialState

    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(trial.state in done for trial in study.get_trials(deepcopy=False))


_ALREADY_REPORTED = "The reported value is ignored because this"


class SweepOptunaSearch(OptunaSearch):
    """Tune's ``OptunaSearch``, with a trial that its scheduler stopped early (a result without
    ``completed``) told to the study as PRUNED, its last value as an intermediate one; each
    trial suggested with its study number, its run's id recorded (see the module docstring)."""

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        trial = self._ot_trials.get(trial_id)
        if not isinstance(config, dict) or trial is None:
            return config
        trial.set_user_attr(TUNE_TRIAL_ATTR, trial_id)
        return config | {"tracking": {"trial_number": trial.number}}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # a resumed trial reports again the epochs after its checkpoint that Optuna already
        # holds: the study keeps the first values, and its warning is not the user's business
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_ALREADY_REPORTED)
            super().on_trial_result(trial_id, result)

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        self._record_run(trial_id)
        stopped_early = result is not None and not error and not result.get("completed")
        if not stopped_early or isinstance(self.metric, list) or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, result, error)
            return
        from optuna.trial import TrialState

        trial = self._ot_trials[trial_id]
        value = result.get(self.metric)
        if value is not None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_ALREADY_REPORTED)
                trial.report(float(value), step=int(result.get("epoch", 0)))
        self._ot_study.tell(trial, state=TrialState.PRUNED)
        self._completed_trials.add(trial_id)

    def _record_run(self, trial_id: str) -> None:
        """The trial's MLflow run id in its study trial, while the trial can still take it."""
        find = RUN_FINDERS.get(self._study_name)
        trial = self._ot_trials.get(trial_id)
        if find is None or trial is None or trial_id in self._completed_trials:
            return
        run_id = find(trial_id)
        if run_id is not None:
            trial.set_user_attr(MLFLOW_RUN_ATTR, run_id)


def searcher(spec: SearchSpec, url: str, stage: int = 0) -> SweepOptunaSearch:
    """The seeded TPE searcher of ``spec`` on the study at ``url``, for the search's ``stage``
    (each stage draws from its own seed: a later stage must not repeat an earlier one's
    random start-up points)."""
    metric = list(spec.metrics) if spec.multi_objective else spec.metrics[0]
    mode = list(spec.modes) if spec.multi_objective else spec.modes[0]
    return SweepOptunaSearch(
        metric=metric,
        mode=mode,
        seed=spec.seed if stage == 0 else derive_seed(spec.seed, "search-stage", stage) % 2**31,
        storage=rdb_storage(url),
        study_name=spec.name,
    )


__all__ = [
    "MLFLOW_RUN_ATTR",
    "RUN_FINDERS",
    "STUDY_FILE",
    "TUNE_TRIAL_ATTR",
    "SweepOptunaSearch",
    "finished_trials",
    "open_study",
    "rdb_storage",
    "searcher",
    "study_storage_url",
]
