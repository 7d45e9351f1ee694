"""``linc-ablation``: the twelve ablation variants x seeds as one Tune experiment, then the table.

    linc-ablation preset=cpu                      # a laptop, about 7 minutes on 2 cores
    linc-ablation preset=cpu-repro                # the paper's protocol at 50 epochs
    linc-ablation preset=paper                    # on a GPU cluster (ray job submit)
    linc-ablation preset=smoke ablation.seeds=[1,2]

Every trial is an MLflow run nested under the sweep's parent run; each final checkpoint is
evaluated on the ablation set (``data.eval_source``) and the table (Obj., gap to Full LINC)
is printed and logged to the parent run. Re-running the same command resumes an interrupted
sweep: finished trials are kept, the others continue from their last checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from sweeps.cli import print_mlflow_ui, run_cli


def ablation(config) -> int:
    from orchestration.experiment.ablation import run_ablation

    result = run_ablation(config)
    print(f"\n{result.table}")
    print_mlflow_ui(result.tracking_uri, result.parent_run_id, result.registered)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("linc-ablation", argv, ablation, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
