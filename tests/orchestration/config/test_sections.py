"""The sections' own rules, reached from the command line: one line (exit 2) naming the key and
the value, never a traceback."""

from __future__ import annotations

import pytest

from orchestration.config.sections import DataSpec, TaskSpec
from sweeps.ablation import main as ablation


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.eval_limit=-3", "data.eval_limit: expected >= 1 or null, got -3"),
        ("data.eval_limit=0", "data.eval_limit: expected >= 1 or null, got 0"),
        ("data.eval_max_customers=0", "data.eval_max_customers: expected >= 1 or null, got 0"),
        (
            "data.eval_also=[sampling]",  # the preset's own decoding is sampling
            "data.eval_also: expected decodings other than 'sampling', each once, "
            "got ('sampling',)",
        ),
        (
            "data.eval_also=[sgbs,sgbs]",
            "data.eval_also: expected decodings other than 'sampling', each once, "
            "got ('sgbs', 'sgbs')",
        ),
        ("data.eval_pyvrp_seconds=-1", "data.eval_pyvrp_seconds: expected >= 0, got -1.0"),
        (
            "task.num_customers=99999999999999999999",
            "task.num_customers: expected 2 to 100000, got 99999999999999999999",
        ),
        ("task.num_customers=100001", "task.num_customers: expected 2 to 100000, got 100001"),
        ("task.num_customers=-5", "task.num_customers: expected 2 to 100000, got -5"),
    ],
)
def test_a_bad_data_or_task_value_is_one_line_naming_it(override, message, capsys) -> None:
    assert ablation([override, "--cfg", "plan", "-p", "data"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"linc-ablation: invalid config: {message}\n"


def test_the_evaluation_settings_it_accepts_reach_the_plan(capsys) -> None:
    argv = ["data.eval_limit=3", "data.eval_max_customers=50", "data.eval_also=[sgbs]"]
    assert ablation([*argv, "--cfg", "plan", "-p", "evaluation"]) == 0
    shown = capsys.readouterr().out
    assert "limit: 3" in shown and "max_customers: 50" in shown and "- sgbs" in shown


def test_the_sections_refuse_on_their_own_too() -> None:
    with pytest.raises(ValueError, match=r"^eval_limit: expected >= 1 or null, got -3$"):
        DataSpec(eval_limit=-3)
    with pytest.raises(ValueError, match=r"^num_customers: expected 2 to 100000, got 100001$"):
        TaskSpec(num_customers=100_001)
    assert TaskSpec(num_customers=100_000).num_customers == 100_000
