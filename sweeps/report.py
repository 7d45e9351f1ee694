"""``linc-report``: the paper-shaped tables rebuilt from MLflow runs (reads the tracking store
only; Ray is not imported).

    linc-report ablation --experiment linc-cpu --sweep ablation-cpu
    linc-report budget   --experiment linc-cpu
    linc-report benchmark --experiment linc-cpu
    linc-report main --experiment linc-main --sweep main-cpu --out reports/main-cpu
    linc-report ablation --tracking-uri http://mlflow.internal:5000 --experiment linc-ablation
    linc-report ablation --experiment linc-cpu --out reports/ablation-cpu
    linc-report register --run 4aae6ca33cbe4242943689250623677d --name linc-cpu

``ablation``: mean final evaluation cost per variant over seeds with the gap to the ``--compare-to``
variant (default: the one the ``--sweep`` recorded, so the rebuilt report is the one the sweep
logged; else Full LINC), then the statistics table: intervals over seeds, the gap paired by seed and
instance with its bootstrap interval, and whether its sign is resolved
(``orchestration.report.ablation``). ``benchmark``: per evaluation set and variant, the mean cost
and the count of infeasible solutions. ``budget``: per run, epochs, parameter count, training
seconds (the budget's clock, as the sweep's console shows them) and the run's wall time (start-up,
validation and evaluation included). ``main``: the paper's main table of a sweep evaluated on a
benchmark (``preset=main-cpu``): method x benchmark, Obj., gap to BKS, time, the BKS and PyVRP rows,
each Full LINC-vs-baseline gap paired by seed and instance with its bootstrap interval and whether
the ordering is resolved, the budget in the caption (``orchestration.report.main_table``); with
``--out`` also ``time_to_quality.png``, with ``--peer-curve FILE`` an external model's curve on it
(``python -m bench.bench_quality``).
``--out DIR`` writes the table as ``DIR/TABLE.md``; for
``ablation`` also the statistics (``.md``, ``.csv``), ``ablation_chart.png``,
``training_curves.png`` and ``pairwise_curves.png`` (``orchestration.report.figures``);
``--reference-curves FILE`` compares a seed's training curves with published ones.
``main --register SUFFIX`` registers each model's best trial (lowest ``eval_cost``) as
``linc-SUFFIX``, ``polynet-SUFFIX`` and ``pomo-SUFFIX``.
``register --run RUN_ID --name NAME``: the trial run's final policy logged as a pyfunc model on
that run and registered (``orchestration.tracking.registry``; a sweep with
``tracking.register`` registers its best trial itself).
The tracking store defaults to ``$MLFLOW_TRACKING_URI``, else ``runs/mlflow.db``
(``orchestration.tracking.store.resolve_tracking_uri``, as the sweeps pick it).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from linc_core.commands.flags import OneLineParser
from linc_core.metrics import EVAL_COST, TRAIN_SECONDS
from linc_core.utils.atomic import write_atomic
from linc_core.utils.secrets import redact, redact_logging
from linc_core.utils.typed import ConfigError, did_you_mean
from orchestration.config.sections import NAME_RULE, is_safe_name
from orchestration.report.ablation import read_reference_curves, reference_curve_check

DEFAULT_STORE = "runs/mlflow.db"


def benchmark_table(rows: Sequence[dict[str, Any]]) -> str:
    from orchestration.report.tables import aggregate_rows

    lines = ["| Set | Variant | Obj. | Infeasible | Runs |", "|---|---|---:|---:|---:|"]
    for eval_set in sorted({r["eval_set"] for r in rows if r["eval_set"]}):
        subset = [r for r in rows if r["eval_set"] == eval_set]
        for row in aggregate_rows(subset, compare_to=None):
            obj = f"{row['obj']:.2f}" if row["obj"] is not None else "-"
            cells = (eval_set, row["label"], obj, f"{row['infeasible']:.0f}", str(row["seeds"]))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def best_per_model(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``{variant: run_id}`` of each variant's trial with the lowest ``eval_cost``."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        cost = row.get(EVAL_COST)
        if cost is not None and (
            row["variant"] not in best or cost < best[row["variant"]][EVAL_COST]
        ):
            best[row["variant"]] = row
    return {variant: row["run_id"] for variant, row in best.items()}


def budget_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| Variant | Seed | Epochs | Parameters | Training (s) | Run wall time (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def shown(value: float | None, form: str) -> str:
        return format(value, form) if value is not None else "-"

    for row in sorted(rows, key=lambda r: (str(r["variant"]), str(r["seed"]))):
        cells = (
            str(row["variant"]),
            str(row["seed"]),
            shown(row["epochs"], ".0f"),
            shown(row["parameters"], ",.0f"),
            shown(row.get(TRAIN_SECONDS), ".1f"),
            shown(row["seconds"], ".0f"),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _register(tracking_uri: str, run_id: str, name: str) -> int:
    """``linc-report register``: the run's policy as ``models:/NAME/VERSION``; one line and 2
    when it cannot be (no such run, no checkpoint tag, a checkpoint refused)."""
    from mlflow.exceptions import MlflowException

    from orchestration.tracking.registry import register_run
    from orchestration.tracking.target import TrackingTarget

    try:
        version = register_run(TrackingTarget(tracking_uri, "linc"), run_id, name)
    except (LookupError, ValueError, MlflowException) as err:  # ValueError: CheckpointError
        reason = " ".join(redact(str(err)).split())[:600]
        print(f"linc-report: register: {reason}", file=sys.stderr)
        return 2
    print(f"registered run {run_id}'s policy as models:/{name}/{version}")
    return 0


def _log_on_parents(client, runs, files: dict[str, bytes]) -> None:
    """``files`` as ``report/NAME`` artifacts of the runs' sweep parent run(s)."""
    import tempfile

    parents = {r.data.tags.get("mlflow.parentRunId") for r in runs} - {None}
    with tempfile.TemporaryDirectory() as folder:
        for name, content in files.items():
            write_atomic(Path(folder) / name, content)
        for parent in sorted(parents):
            client.log_artifacts(parent, folder, artifact_path="report")
            print(f"logged {', '.join(sorted(files))} on run {parent} (report/)")


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="linc-report",
        description="The paper-shaped tables rebuilt from MLflow runs, and a trial's policy "
        "registered as an MLflow model (reads the tracking store only).",
    )
    parser.add_argument("table", choices=("ablation", "benchmark", "budget", "main", "register"))
    parser.add_argument("--tracking-uri", default=None)
    parser.add_argument("--experiment", default="linc-cpu")
    parser.add_argument("--sweep", default=None, help="only the trials of this sweep")
    parser.add_argument(
        "--compare-to",
        default=None,
        help="the variant the gaps are relative to (default: the --sweep's own, else full_linc)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="write the table (and ablation's figures) here"
    )
    parser.add_argument(
        "--reference-curves",
        type=Path,
        default=None,
        help="ablation: compare the sweep's training curves with the reference implementation's "
        "published ones (a JSON of score_by_epoch per variant)",
    )
    parser.add_argument(
        "--reference-seed", type=int, default=1234, help="the seed of the reference curves"
    )
    parser.add_argument(
        "--run", default=None, help="register: the trial run whose final policy is registered"
    )
    parser.add_argument("--name", default="linc", help="register: the registered model's name")
    parser.add_argument(
        "--peer-curve",
        type=Path,
        action="append",
        default=[],
        help="main: an external model's time-to-quality curve to draw beside the sweep's "
        "(python -m bench.bench_quality --out FILE: rl4co's PolyNet)",
    )
    parser.add_argument(
        "--log",
        action="store_true",
        help="main: log the table and figure on the sweep's parent run too (report/), e.g. "
        "after adding a --peer-curve",
    )
    parser.add_argument(
        "--register",
        default=None,
        metavar="SUFFIX",
        help="main: register each model's best trial (lowest eval_cost) as linc-SUFFIX, "
        "polynet-SUFFIX, pomo-SUFFIX (e.g. cvrptw-cpu)",
    )
    return parser


def _existing_store(given: str | None) -> str | None:
    """The tracking store to read (None: there is none; the line saying so is printed)."""
    from orchestration.experiment.preflight import check_readable_store
    from orchestration.failures import SweepRefused
    from orchestration.tracking.store import resolve_tracking_uri

    tracking_uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if tracking_uri is None and not Path(DEFAULT_STORE).exists():
        print(
            f"linc-report: no tracking store at {DEFAULT_STORE} (the sweeps' default); pass "
            "--tracking-uri or set MLFLOW_TRACKING_URI",
            file=sys.stderr,
        )
        return None
    tracking_uri = resolve_tracking_uri(tracking_uri)
    try:
        check_readable_store("--tracking-uri", tracking_uri)
    except SweepRefused as err:
        print(f"linc-report: {err}", file=sys.stderr)
        return None
    return tracking_uri


def _table(args: argparse.Namespace, client, rows: list[dict]) -> tuple[str, dict[str, bytes]]:
    """The table ``args.table`` of the trial ``rows`` and, for the ablation, its report files."""
    from orchestration.report.tables import ablation_table

    # the default (the sweep's own, else Full LINC) may be absent: then no gap column
    compare_to = args.compare_to if args.compare_to in {r["variant"] for r in rows} else None
    if args.table == "benchmark":
        return benchmark_table(rows), {}
    if args.table == "budget":
        return budget_table(rows), {}
    if args.table == "main":
        from orchestration.report.ablation import finished_trial_runs
        from orchestration.report.main_table import main_report_files

        runs = finished_trial_runs(client, args.experiment, sweep=args.sweep)
        peers = {}
        for path in args.peer_curve:  # {"label": ..., "curve": [[seconds, gap], ...]}
            try:
                peer = json.loads(path.read_text())
                peers[peer["label"]] = [(float(t), float(g)) for t, g in peer["curve"]]
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise SystemExit(
                    f"linc-report: --peer-curve {path}: expected the JSON python -m "
                    f"bench.bench_quality writes ({type(err).__name__}: {err})"
                ) from None
        files = main_report_files(client, runs, compare_to, peers)
        if args.log:
            _log_on_parents(client, runs, files)
        return files.pop("main_table.md").decode().rstrip(), files
    from orchestration.report.ablation import collect, report_files

    table = ablation_table(rows, compare_to)
    data = collect(client, rows)
    files = report_files(data, compare_to)
    table += "\n\n" + files["ablation_statistics.md"].decode().rstrip()
    if args.reference_curves is not None:
        check = reference_curve_check(data.histories, args.reference_curves, args.reference_seed)
        files["reference_curves.md"] = (check + "\n").encode()
        table += "\n\n" + check
    return table, files


def main(argv: Sequence[str] | None = None) -> int:
    redact_logging()  # MLflow's and linc's warnings name the store: masked like every line
    # MLflow's INFO lines ("Successfully registered model ...") are not the report's: its own
    # line names what was registered. MLflow reads the variable when first imported.
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.table == "register" and not args.run:
        parser.error("register: --run RUN_ID is required (a finished trial run)")
    try:
        _check_arguments(args)  # before any work: a typo costs a second, not the report
        return _report(args)
    except ConfigError as err:
        print(redact(f"linc-report: {' '.join(str(err).split())}"), file=sys.stderr)
        return 2


def _check_arguments(args: argparse.Namespace) -> None:
    """The names, the reference curves and the output folder usable, or :class:`ConfigError`."""
    for flag, value in (
        ("--sweep", args.sweep),
        ("--name", args.name),
        ("--register", args.register),
    ):
        if value is not None and not is_safe_name(value):
            raise ConfigError(f"{flag}: expected {NAME_RULE}, got {value!r}")
    if args.reference_curves is not None:
        read_reference_curves(args.reference_curves)
    if args.out is not None:
        check_output_folder("--out", args.out)


def check_output_folder(flag: str, folder: Path) -> None:
    """``folder`` is, or can be made, a writable folder (nothing is created here)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "is" if existing == folder else f"lies under {existing}, which is"
        raise ConfigError(f"{flag}: {folder} {where} a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag}: cannot write to {folder} ({existing}: permission denied)")


def _report(args: argparse.Namespace) -> int:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from orchestration.failures import one_line
    from orchestration.report.ablation import finished_trial_runs, run_rows

    tracking_uri = _existing_store(args.tracking_uri)
    if tracking_uri is None:
        return 2
    if args.table == "register":
        return _register(tracking_uri, args.run, args.name)
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        rows = run_rows(finished_trial_runs(client, args.experiment, sweep=args.sweep))
    except LookupError as err:
        print(f"linc-report: {redact(str(err))}", file=sys.stderr)
        return 2
    except MlflowException as err:  # a store MLflow refuses (an unknown scheme, a folder store)
        reason = one_line(err, limit=300)
        print(f"linc-report: --tracking-uri: {redact(tracking_uri)}: {reason}", file=sys.stderr)
        return 2
    if not rows:
        raise ConfigError(_no_rows(client, args))
    if args.compare_to is not None:
        present = sorted({str(r["variant"]) for r in rows})
        if args.compare_to not in present:
            raise ConfigError(
                f"--compare-to: no variant {args.compare_to!r} among the runs"
                f"{did_you_mean(args.compare_to, present)}; present: {', '.join(present)}"
            )
    else:
        from orchestration.report.sweep_report import recorded_compare_to

        recorded = recorded_compare_to(client, args.experiment, args.sweep) if args.sweep else None
        args.compare_to = recorded or "full_linc"
    table, files = _table(args, client, rows)
    print(table)
    if args.table == "main" and args.register:
        for variant, run_id in best_per_model(rows).items():
            name = f"{'linc' if variant == 'full_linc' else variant}-{args.register}"
            if _register(tracking_uri, run_id, name) != 0:
                return 2
    if args.out is not None:
        files = {f"{args.table}_table.md": (table + "\n").encode()} | files
        for name, data in files.items():
            write_atomic(args.out / name, data)
        print(f"wrote {', '.join(str(args.out / name) for name in files)}")
    return 0


def _no_rows(client, args: argparse.Namespace) -> str:
    """Why there is nothing to report: no such sweep (naming the ones there are), or no
    finished trial run."""
    from orchestration.report.sweep_report import sweep_names

    where = f"experiment {args.experiment!r}"
    if args.sweep is None:
        return f"no finished trial runs in {where}"
    sweeps = sweep_names(client, args.experiment)
    if args.sweep in sweeps:
        return f"--sweep {args.sweep}: no finished trial runs of it in {where}"
    listed = ", ".join(sweeps) if sweeps else "none"
    hint = did_you_mean(args.sweep, sweeps)
    return f"--sweep: no sweep {args.sweep!r} in {where}{hint}; its sweeps: {listed}"


if __name__ == "__main__":
    raise SystemExit(main())
