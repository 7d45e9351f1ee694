"""``linc-hpo``: hyper-parameter search with Optuna (TPE) through Tune, ASHA early stopping.

    linc-hpo search.num_samples=16 search.max_concurrent=2
    linc-hpo 'search.space={train.weight_decay: {distribution: loguniform, low: 1e-7, high: 1e-5}}'

``search.space=...`` adds parameters to the chosen search space (``search/learning_rate.yaml``);
for a different space, add a file to ``sweeps/conf/search`` and pick it with ``search=NAME``.

The best configuration is printed and logged to the search's MLflow parent run
(``best_config.json`` and ``best.*`` tags, the study's trials, Optuna's figures). The Optuna
study is kept in ``search.storage`` (default: ``optuna.db`` beside the tracking store) under
``search.name``: re-running the command resumes it, and with a larger ``search.num_samples``
adds only the missing trials. ``search.metric`` and ``search.mode`` may be lists (a
multi-objective search: its Pareto front); ``search=switches`` searches the variant switches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sweeps.cli import print_mlflow_ui, run_cli


def hpo(config) -> int:
    from orchestration.experiment.search import run_search

    result = run_search(config)
    print(f"\n{result.table}")
    if isinstance(result.best, dict):  # a Pareto front: the summary line above lists it
        print(f"\nbest: {json.dumps(result.best)}")
    if result.study is not None:
        name, storage = result.study
        print(f"Optuna study {name!r}: optuna.load_study(study_name={name!r}, storage={storage!r})")
        print(f"  or: optuna-dashboard {storage} --host 127.0.0.1")
        if "***" in storage:
            print("  (the password is masked here: give yours, e.g. through PGPASSWORD)")
    print_mlflow_ui(result.tracking_uri, result.parent_run_id, result.registered)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("linc-hpo", argv, hpo, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
