"""``linc-tune``: one training run as a Ray Tune trial (MLflow tracking, checkpoints, retries).

    linc-tune model.variant=full_linc train.epochs=20
    linc-tune preset=paper-train cluster=gpu                       # on a cluster
    linc-tune cluster=ddp cluster.num_workers=4                    # one data-parallel trial

``linc-train`` is the same training without Ray (the plain ``fit`` loop, argparse flags).
"""

from __future__ import annotations

from collections.abc import Sequence

from sweeps.cli import print_mlflow_ui, run_cli


def train(config) -> int:
    from orchestration.experiment.sweep import run_training

    result = run_training(config)
    row = result.rows[0]

    def shown(value: object) -> str:  # the costs as the console's other lines show them
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    print(
        f"{result.name}: {row['epochs']} epochs, train best-of-K {shown(row['train_best_cost'])}, "
        f"validation {shown(row['validation_cost'])}, eval {shown(row['eval_cost'])}"
    )
    print(f"Tune experiment: {result.experiment_path}")
    print_mlflow_ui(result.tracking_uri, result.parent_run_id)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli("linc-tune", argv, train, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
