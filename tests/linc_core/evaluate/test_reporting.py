"""Reporting: the paper's time style and the markdown table's numbers and wording."""

from __future__ import annotations

from linc_core.evaluate import format_seconds, markdown_table


def test_times_print_like_the_paper():
    assert [format_seconds(s) for s in (0.9, 6.2, 24.4, 150, 5400)] == [
        "0.9s",
        "6.2s",
        "24s",
        "2m",
        "1.5h",
    ]


def test_markdown_table_rows_and_notes_give_the_summary_numbers():
    summary = {
        "mean_cost": 830.25,
        "mean_bks": 827.3,
        "mean_gap_bks_pct": 0.5,
        "median_gap_bks_pct": 0.4,
        "aggregate_gap_bks_pct": 0.25,
        "instances_with_bks": 2,
        "mean_pyvrp_gap_pct": -1.0,
        "aggregate_pyvrp_gap_pct": -1.5,
        "instances_with_pyvrp": 1,
        "seconds": 150.0,
        "errors": 1,
        "instances": 3,
        "feasible": 2,
        "rollouts": 600,
        "rollouts_per_second": 4.0,
        "family_gaps_bks": {
            "C1": {"mean_gap_bks_pct": 0.3, "instances": 1},
            "RC2": {"mean_gap_bks_pct": 0.7, "instances": 1},
        },
    }
    table = markdown_table("solomon100", "dimacs", [("LINC", summary)], ("PyVRP (1s)", 838.0, 3.0))
    lines = table.splitlines()
    assert lines[0] == "**solomon100** (dimacs costs)"
    assert lines[4] == "| BKS | 827.3 | -- | -- | -- | -- |"
    assert lines[5] == "| PyVRP (1s) | 838.0 | -- | -- | 3.0s | -- |"
    assert lines[6] == "| LINC | 830.2 | 0.50% | -1.00% | 2m | 1/3 |"
    assert lines[8] == (
        "LINC: 2/3 feasible; mean gap 0.50%, median 0.40%, aggregate gap 0.25% vs BKS "
        "(2 instances); vs PyVRP mean -1.00%, aggregate -1.50% (1); 600 rollouts, 4 rollouts/s."
    )
    assert lines[9] == "LINC, mean gap vs BKS by family: C1 0.30% (1), RC2 0.70% (1)."
    # a set without Solomon-style names (X, TSPLIB) prints no family line
    summary["family_gaps_bks"] = {}
    plain = markdown_table("x", "cvrplib", [("LINC", summary)]).splitlines()
    assert plain[-1].startswith("LINC: 2/3 feasible") and not any("family" in x for x in plain)
