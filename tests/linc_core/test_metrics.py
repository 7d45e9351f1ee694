"""Metric names live in one place (``linc_core.metrics``): the table is consistent, ``fit``
records exactly its epoch metrics, and no other module spells a metric's name as a string."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import linc_core.metrics as metrics
from linc_core.metrics import EPOCH_METRICS, GLOBAL_STEP, METRICS, recorded
from linc_core.train import GeneratedData, fit
from tests.conftest import tiny_configs, tiny_policy

REPO = Path(__file__).resolve().parents[2]
# Words that are also ordinary keys (a checkpoint's epoch, a row's seconds): not guarded.
COMMON_WORDS = {"epoch", "seconds", "loss", "tau", "trials", "global_step"}


def test_the_table_names_each_constant_once() -> None:
    constants = {
        value for name, value in vars(metrics).items() if name.isupper() and isinstance(value, str)
    }
    assert constants == set(METRICS)
    for name, metric in METRICS.items():
        assert metric.name == name and metric.meaning and metric.meaning[-1] != "."
    assert set(EPOCH_METRICS) | {GLOBAL_STEP} == set(recorded("epoch"))


def test_fit_records_exactly_the_epoch_metrics() -> None:
    _, train = tiny_configs(
        "full_linc", "cvrptw", num_rollouts=4, batch_size=2, instances_per_epoch=2, epochs=1
    )
    result = fit(tiny_policy(), train, GeneratedData.for_training("cvrptw", 5, train, seed=1))
    (record,) = result.history
    assert set(record) == set(recorded("epoch")) - {metrics.VALIDATION_COST}


def test_no_module_spells_a_metric_name() -> None:
    guarded = set(METRICS) - COMMON_WORDS
    found = []
    for root in ("linc_core", "orchestration", "sweeps", "faults"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.name == "metrics.py" and path.parent.name == "linc_core":
                continue
            tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
            for token in tokens:
                if token.type == tokenize.STRING and token.string[1:-1] in guarded:
                    found.append(f"{path.relative_to(REPO)}:{token.start[0]} {token.string}")
    assert found == [], "use linc_core.metrics' constants:\n" + "\n".join(found)
