"""A search's Optuna study written by someone else (``orchestration.experiment.search``,
``orchestration.report.study``): whoever can write its storage adds a COMPLETE trial with the
best value, a parameter holding a Markdown row, HTML, a link and terminal escape codes, and an
``mlflow_run_id`` naming any run. The search believes only the trials a run of its sweep
records: the forged one is no best, no row, no tag, no done sample, and is named in a warning;
whatever a table shows is plain text."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from orchestration.experiment.search import _checked, _finished, _log_study
from orchestration.experiment.study import finished_trials, open_study
from orchestration.report.study import pareto_table, plain_text, study_table
from sweeps.compose import load_platform_config

EVIL = (
    "x |\n| 999 | COMPLETE | 0.01 | <img src=https://attacker.example/p.png> "
    "[click](https://attacker.example) \x1b]0;pwned\x07\x1b[2J\u202e\x9b"
)
FORGED_RUN = "0123456789abcdef0123456789abcdef"
LR = FloatDistribution(1e-5, 1e-3, log=True)
TAU = FloatDistribution(1.0, 100.0, log=True)


class Parent:
    """The parent run's writer: what the search logs on it."""

    run_id = "p" * 32

    def __init__(self) -> None:
        self.tags: dict[str, str] = {}
        self.texts: dict[str, str] = {}
        self.metrics: dict[str, float] = {}

    def set_tags(self, tags: dict[str, str]) -> None:
        self.tags |= tags

    def log_text(self, text: str, name: str) -> None:
        self.texts[name] = text

    def log_bytes(self, data: bytes, name: str) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float]) -> None:
        self.metrics |= metrics


def child(number: int, metrics: dict[str, float], study: str = "hpo-smoke") -> SimpleNamespace:
    tags = {"optuna.trial_number": str(number), "optuna.study": study}
    return SimpleNamespace(
        info=SimpleNamespace(run_id=f"{number:032x}"),
        data=SimpleNamespace(tags=tags, metrics=metrics),
    )


def sweep_runs(children: list | None) -> SimpleNamespace:
    def child_runs(parent_id: str) -> list:
        if children is None:
            raise ConnectionError("tracking store down")
        return children

    return SimpleNamespace(
        parent=Parent(), tracking=SimpleNamespace(child_runs=child_runs), best=None
    )


def trial(values: list[float] | None, run: str, state=TrialState.COMPLETE, **params) -> object:
    dists = {"train/learning_rate": LR, "train/tau_start": TAU}
    names = {k.replace(".", "/"): v for k, v in params.items()}
    dists |= {k: CategoricalDistribution([v]) for k, v in names.items() if k not in dists}
    return create_trial(
        state=state,
        values=values,
        params=names,
        distributions={k: dists[k] for k in names},
        user_attrs={"mlflow_run_id": run},
    )


def forged_study(tmp_path: Path, *overrides: str):
    tmp_path.mkdir(exist_ok=True)
    config = load_platform_config(["preset=smoke", f"cluster.storage={tmp_path}", *overrides])
    spec = config.search
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = open_study(spec, url)
    many = spec.multi_objective
    legit = [([0.5, 9.0] if many else [0.5]), ([0.4, 8.0] if many else [0.4])]
    study.add_trial(
        trial(legit[0], f"{0:032x}", **{"train.learning_rate": 1e-4, "train.tau_start": 5.0})
    )
    study.add_trial(
        trial(legit[1], f"{1:032x}", **{"train.learning_rate": 2e-4, "train.tau_start": 9.0})
    )
    study.add_trial(trial(None, f"{2:032x}", TrialState.PRUNED, **{"train.learning_rate": 3e-4}))
    best = [0.0001, 0.1] if many else [0.0001]
    evil = {"train.learning_rate": 1e-3, "train.tau_start": 1.0, "train.evil": EVIL}
    study.add_trial(trial(best, FORGED_RUN, **evil))  # 3: the red team's trial
    # 4: a searched trial's parameters, with run 1's id and a better value than run 1 logged
    study.add_trial(
        trial(best, f"{1:032x}", **{"train.learning_rate": 5e-4, "train.tau_start": 2.0})
    )
    metrics = [dict(zip(spec.metrics, values, strict=True)) for values in legit]
    children = [child(0, metrics[0]), child(1, metrics[1]), child(2, {"epoch": 1.0})]
    children.append(child(3, metrics[0], study="another-study"))  # another study's trial 3
    return spec, url, study, sweep_runs(children)


def assert_plain(text: str) -> None:
    assert all(c.isprintable() or c == "\n" for c in text), ascii(text)
    for injected in ("999", "<img", "[click](", "pwned"):
        assert injected not in text


def test_a_forged_trial_is_no_best_no_row_no_tag_and_named_in_one_warning(tmp_path, caplog) -> None:
    spec, url, study, runs = forged_study(tmp_path)
    with caplog.at_level(logging.WARNING):
        shown = _checked(runs, study, spec, url)
    best = _log_study(runs, shown, spec, url)
    assert best["trial"] == 1 and best["validation_cost"] == 0.4
    assert runs.best.run_id == f"{1:032x}" and "trial 1" in runs.best.why
    tags, texts = runs.parent.tags, runs.parent.texts
    assert tags["best.train.learning_rate"] == "0.0002" and "best.train.evil" not in tags
    assert runs.parent.metrics == {"best_validation_cost": 0.4}
    table = texts["study_trials.md"]
    assert_plain(table)
    rows = table.splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 0", "| 2"]
    assert study_table(shown, spec) == table
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert "trial(s) 3, 4 left out (2)" in warned[0] and str(tmp_path / "optuna.db") in warned[0]


def test_forged_trials_are_not_done_samples(tmp_path) -> None:
    spec, _, study, runs = forged_study(tmp_path)
    assert finished_trials(study) == 5
    assert _finished(runs, study, spec) == 3  # the search trains the missing ones
    # a tracking store that cannot be read: the study's own count (no run trained again)
    assert _finished(sweep_runs(None), study, spec) == 5


def test_an_unreadable_tracking_store_shows_no_trial(tmp_path, caplog) -> None:
    spec, url, study, _ = forged_study(tmp_path)
    runs = sweep_runs(None)
    with caplog.at_level(logging.WARNING):
        shown = _checked(runs, study, spec, url)
    assert _log_study(runs, shown, spec, url) is None and runs.best is None
    assert runs.parent.texts["study_trials.md"].count("\n") == 1  # the header only
    assert any("tracking store could not be read" in r.getMessage() for r in caplog.records)


def test_a_multi_objective_front_holds_no_forged_trial(tmp_path) -> None:
    objectives = ("search.metric=[validation_cost,seconds]", "search.mode=[min,min]")
    spec, url, study, runs = forged_study(tmp_path, *objectives)
    front = _log_study(runs, _checked(runs, study, spec, url), spec, url)
    assert [f["trial"] for f in front] == [1]
    tags = runs.parent.tags
    assert tags["pareto_front.trials"] == "1" and tags["pareto_front.run_ids"] == f"{1:032x}"
    assert tags["lowest_validation_cost.trial"] == "1" and tags["lowest_seconds.trial"] == "1"
    assert_plain(runs.parent.texts["pareto_front.md"])
    assert_plain(runs.parent.texts["study_trials.md"])


def test_every_table_shows_a_forged_value_as_plain_text(tmp_path) -> None:
    """Even a study read unchecked: one row per trial, its value escaped, cut and on one line."""
    spec, _, study, _ = forged_study(tmp_path)
    table = study_table(study, spec)
    assert len(table.splitlines()) == 2 + len(study.trials)
    assert "\x1b" not in table and "\x07" not in table and "\u202e" not in table
    assert "train.evil=x \\|\\n\\| 999 \\| COMPLETE" in table and "\\<img src=" in table
    assert "\\[click\\](https://attacker.exam... |" in table  # cut to 100 characters
    cells = [len(re.findall(r"(?<!\\)\|", row)) for row in table.splitlines()]
    assert set(cells) == {5}  # every row: 4 cells, none cut by an injected '|'
    objectives = ("search.metric=[validation_cost,seconds]", "search.mode=[min,min]")
    spec, _, study, _ = forged_study(tmp_path / "multi", *objectives)
    front = pareto_table(study, spec)
    assert "\x1b" not in front and "\n| 999" not in front and "\\<img" in front


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("a|b", "a\\|b"),
        ("line\nnext\r", "line\\nnext\\r"),
        ("\x1b[2J\x9b\x7f", "\\x1b\\[2J\\x9b\\x7f"),
        ("![i](http://x)", "!\\[i\\](http://x)"),
        ("<b>`c`*", "\\<b\\>\\`c\\`\\*"),
        ("\u202egnp.exe", "\\u202egnp.exe"),
        (0.25, "0.25"),
        ("é 1e-4", "é 1e-4"),
    ],
)
def test_plain_text_escapes_markdown_and_control_characters(value, shown) -> None:
    assert plain_text(value) == shown


def test_plain_text_is_cut_to_its_limit() -> None:
    assert plain_text("a" * 500) == "a" * 100 + "..."
    assert plain_text("\x1b" * 500, limit=3) == "\\x1b" * 3 + "..."
    assert isinstance(optuna.__version__, str)
