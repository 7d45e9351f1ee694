"""The sweep's figures: bars that are the table's gaps, curves that are the seeds' means, and
``linc-report ablation --out`` writing both from a real MLflow store."""

from __future__ import annotations

import io

import matplotlib.image
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from orchestration.report.ablation import collect, finished_trial_runs, report_charts, run_rows
from orchestration.report.figures import ablation_chart, training_curves
from orchestration.report.tables import aggregate_rows
from sweeps.report import main as report_main
from tests.conftest import PNG_MAGIC


def _image(png: bytes):
    assert png.startswith(PNG_MAGIC)
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def _row(variant: str, seed: int, cost: float | None) -> dict:
    return {
        "variant": variant,
        "seed": seed,
        "eval_cost": cost,
        "eval_infeasible": 0.0,
        "seconds": 1.0,
    }


def test_ablation_chart_bars_are_the_tables_gaps_with_the_reference_marked() -> None:
    rows = [
        _row("full_linc", 1, 100.0),
        _row("full_linc", 2, 102.0),
        _row("baseline", 1, 105.0),
        _row("baseline", 2, 107.0),
        _row("no_local", 1, 99.0),
        _row("no_gateattn", 1, None),  # every seed failed: no bar
    ]
    chart = ablation_chart(rows, "full_linc")
    height, width, _ = _image(chart.png).shape
    assert width == 800 and height > 100
    # the reference's mean is 101: baseline's 106 is +4.95 %, no_local's 99 is -1.98 %
    assert chart.values["Full LINC (reference)"] == 0.0
    assert chart.values["Baseline"] == pytest.approx(100 * 5 / 101)
    by_label = {row["label"]: row["gap_pct"] for row in aggregate_rows(rows, "full_linc")}
    for label, gap in by_label.items():
        key = f"{label} (reference)" if label == "Full LINC" else label
        assert chart.values[key] == (pytest.approx(gap) if gap is not None else None)
    assert list(chart.values) == [  # the table's row order
        f"{r['label']} (reference)" if r["variant"] == "full_linc" else r["label"]
        for r in aggregate_rows(rows, "full_linc")
    ]


def test_training_curves_are_the_mean_over_seeds_per_variant() -> None:
    histories = {
        "full_linc": {1: [(1, 10.0), (2, 8.0), (3, 7.0)], 2: [(1, 12.0), (2, 10.0), (3, 9.0)]},
        "baseline": {1: [(1, 11.0), (2, 10.5)]},
    }
    chart = training_curves(histories)
    _image(chart.png)
    assert chart.values == {
        "Full LINC": [(1, 11.0), (2, 9.0), (3, 8.0)],
        "Baseline": [(1, 11.0), (2, 10.5)],
    }


def test_fourteen_variants_have_their_own_colours_and_the_reference_is_on_top() -> None:
    from orchestration.report.figures import _colours

    styles = _colours(14)
    assert len({colour for colour, _ in styles}) == 14  # none repeated, none the reference's
    assert "black" not in {colour for colour, _ in styles}
    # every variant on the same curve: only the reference (black, on top) may show in the plot
    variants = ["full_linc", *(f"variant{k:02d}" for k in range(13))]
    histories = {v: {1: [(1, 10.0), (2, 8.0), (3, 7.0)]} for v in variants}
    assert _coloured_pixels(training_curves(histories, reference="full_linc").png) == 0
    # the check sees colour: without a reference every line is a colour
    assert _coloured_pixels(training_curves(histories, reference=None).png) > 0


def _coloured_pixels(png: bytes) -> int:
    """Pixels of a colour (not black, grey or white) in the plot (left of the legend)."""
    image = _image(png)
    plot = image[:, : int(image.shape[1] * 0.6), :3]
    return int(((plot.max(axis=2) - plot.min(axis=2)) > 0.3).sum())


def test_linc_report_ablation_out_writes_the_table_and_both_figures(tmp_path, capsys) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("linc-test", artifact_location=str(tmp_path / "art"))
    costs = {("full_linc", 1): 400.0, ("full_linc", 2): 404.0, ("baseline", 1): 420.0}
    for (variant, seed), cost in costs.items():
        tags = {"variant": variant, "seed": str(seed), "sweep": "ablation-test"}
        run = client.create_run(experiment, tags=tags)
        curve = [Metric("train_best_cost", cost + 50 - 10 * e, 0, e) for e in (1, 2, 3)]
        finals = [Metric("eval_cost", cost, 0, 3), Metric("eval_infeasible", 0.0, 0, 3)]
        client.log_batch(run.info.run_id, metrics=curve + finals)
        rows_csv = f"instance,feasible,cost\nR101,True,{cost}\n"
        client.log_text(run.info.run_id, rows_csv, "evaluation_rows.csv")
        client.set_terminated(run.info.run_id, "FINISHED")
    out = tmp_path / "report"
    args = ["--tracking-uri", uri, "--experiment", "linc-test", "--sweep", "ablation-test"]
    assert report_main(["ablation", *args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = (out / "ablation_table.md").read_text()
    assert table.strip() in printed
    _image((out / "training_curves.png").read_bytes())
    _image((out / "ablation_chart.png").read_bytes())
    # the chart's bars are the statistics table's paired Gap column; the curves the seeds' mean
    rows = run_rows(finished_trial_runs(client, "linc-test", sweep="ablation-test"))
    charts = report_charts(collect(client, rows), "full_linc")
    statistics = (out / "ablation_statistics.md").read_text()
    gaps = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")[3]
        for line in statistics.split("\n\n")[0].splitlines()[2:]
    }
    assert gaps == {"Full LINC": "+0.00", "Baseline": "+5.00"}  # paired on seed 1: 420 vs 400
    bars = charts["ablation_chart.png"].values
    assert bars["Baseline"] == pytest.approx(5.0)
    assert bars["Full LINC (reference)"] == 0.0
    # the paper-shaped table's gap is of the means over each variant's seeds: 420 vs 402
    overview = table.split("\n\n")[0].splitlines()[2:]
    assert {line.split(" | ")[0].lstrip("| "): line.split(" | ")[2] for line in overview} == {
        "Baseline": "+4.48",
        "Full LINC": "+0.00",
    }
    assert charts["training_curves.png"].values == {
        "Full LINC (reference)": [(1, 442.0), (2, 432.0), (3, 422.0)],
        "Baseline": [(1, 460.0), (2, 450.0), (3, 440.0)],
    }
