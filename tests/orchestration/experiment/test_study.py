"""orchestration.experiment.study: the search's Optuna study as Tune's searcher sees it."""

from __future__ import annotations

import warnings

import pytest
from ray import tune
from ray.tune.search.optuna import OptunaSearch

from orchestration.experiment.study import SweepOptunaSearch


@pytest.mark.parametrize("searcher", [OptunaSearch, SweepOptunaSearch])
def test_a_resumed_trial_s_repeated_step_is_kept_quietly(searcher) -> None:
    # a trial resumed from its checkpoint reports again the epochs after it: Optuna keeps the
    # first value and warned on the console each time (Tune's own searcher: the trap)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Tune's note on an unresolved space
        search = searcher(space={"x": tune.uniform(0, 1)}, metric="loss", mode="min", seed=1)
    search.suggest("t1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.on_trial_result("t1", {"loss": 1.0, "training_iteration": 3})
        search.on_trial_result("t1", {"loss": 0.5, "training_iteration": 3})
    said = [str(w.message) for w in caught if "already reported" in str(w.message)]
    assert len(said) == (1 if searcher is OptunaSearch else 0)
    assert search._ot_trials["t1"].storage.get_trial(
        search._ot_trials["t1"]._trial_id
    ).intermediate_values == {3: 1.0}
