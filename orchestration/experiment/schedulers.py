"""Tune's schedulers, keeping the trials of a moved sweep in the sweep's current folder.

Ray Tune 2.60 restores a moved experiment's existing trials into its new folder, but trials its
search algorithm creates after the restore (an ablation run with ``max_concurrent_trials``
creates them one at a time) get the storage the experiment was first started with, from the
search algorithm's saved state: they would write into the old folder (or fail to find it). The
schedulers here see every trial as it is added and give such a trial the storage of the
experiment's restored trials. Tune saves the scheduler with the experiment, so a sweep started
with one keeps it on every resume.
"""

from __future__ import annotations

import copy
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler


def follow_current_storage(controller: Any, trial: Trial) -> None:
    """Give ``trial`` the storage of the experiment's first trial when they differ."""
    for other in controller.get_trials():
        if other is trial:
            continue
        current, mine = other.storage, trial.storage
        if (mine.storage_fs_path, mine.experiment_dir_name) != (
            current.storage_fs_path,
            current.experiment_dir_name,
        ):
            moved = copy.copy(mine)
            moved.storage_filesystem = current.storage_filesystem
            moved.storage_fs_path = current.storage_fs_path
            moved.experiment_dir_name = current.experiment_dir_name
            trial.set_storage(moved)
        return


class SweepFIFOScheduler(FIFOScheduler):
    """Tune's first-in-first-out scheduler (see the module docstring)."""

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        follow_current_storage(tune_controller, trial)
        super().on_trial_add(tune_controller, trial)


class SweepASHAScheduler(ASHAScheduler):
    """Tune's ASHA scheduler (see the module docstring)."""

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        follow_current_storage(tune_controller, trial)
        super().on_trial_add(tune_controller, trial)


__all__ = ["SweepASHAScheduler", "SweepFIFOScheduler", "follow_current_storage"]
