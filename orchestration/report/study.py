"""A search's results from its Optuna study: the trials table, the Pareto front, the figures.

The study (:mod:`orchestration.experiment.study`) is the search's record of every trial, over
all its runs; the tables and figures here are drawn from it, and logged on the search's parent
run by the driver. Figures are Optuna's own (its matplotlib backend), each objective by its
name: ``optimization_history.png`` (a multi-objective search: one per objective,
``optimization_history_METRIC.png``), ``param_importances.png`` (from two complete trials; of
the first objective), ``parallel_coordinate.png`` (of the first objective) and, for a
multi-objective search, ``pareto_front.png``; sized to their parameters, labels not cut.

Whoever can write the study's storage can add trials, with any names and values: the search
draws from :func:`checked_study` (only the trials its tracking store confirms), and every name
or value shown goes through :func:`plain_text` (no escape code, table row, link or HTML).
"""

from __future__ import annotations

import copy
import functools
import logging
import warnings
from collections.abc import Mapping
from typing import Any

from linc_core.utils.plotting import png_bytes
from orchestration.config.platform import dotted_params
from orchestration.config.sweep_sections import SearchSpec

logger = logging.getLogger(__name__)

LEFT_OUT_ATTR = "linc.left_out"  # a placeholder's user attr: the trial of that number is not shown
# what Markdown reads as a link, an image, HTML, code, emphasis or a table cell's end
_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*[]<>|"})


def plain_text(value: Any, limit: int = 100) -> str:
    """``value`` as one line of plain text for a Markdown table, an MLflow tag or the console:
    cut to ``limit`` characters (then ``...``), Markdown's active characters backslash-escaped
    (``\\|``, ``\\[``, ``\\<``...) and every non-printable one (ESC and the other C0/C1 controls,
    a line break, a direction override) written as its escape (``\\x1b``, ``\\n``)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    text = text.translate(_MARKDOWN)
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def checked_study(study: Any, believed: Mapping[int, Mapping[str, Any]]) -> Any:
    """An in-memory copy of ``study`` with only its trials numbered in ``believed``, each under
    its own number and with the user attrs ``believed`` gives it (a trial left out: a FAIL
    placeholder, which no table, figure or best shows)."""
    import optuna
    from optuna.trial import TrialState, create_trial

    with warnings.catch_warnings():  # set_metric_names is "experimental"
        warnings.simplefilter("ignore")
        shown = optuna.create_study(directions=study.directions, study_name=study.study_name)
        if study.metric_names:
            shown.set_metric_names(study.metric_names)
    kept = {t.number: t for t in study.get_trials(deepcopy=False) if t.number in believed}
    for number in range(max(kept, default=-1) + 1):
        if number not in kept:
            shown.add_trial(create_trial(state=TrialState.FAIL, user_attrs={LEFT_OUT_ATTR: True}))
            continue
        trial = copy.deepcopy(kept[number])
        for key, value in believed[number].items():
            trial.set_user_attr(key, value)
        shown.add_trial(trial)
    return shown


def _shown_trials(study: Any) -> list[Any]:
    return [t for t in study.get_trials(deepcopy=False) if LEFT_OUT_ATTR not in t.user_attrs]


def _values(trial: Any, spec: SearchSpec) -> list[str]:
    values = trial.values or [None] * len(spec.metrics)
    return [f"{v:.4f}" if v is not None else "-" for v in values]


def _rank(trial: Any) -> tuple:
    first = trial.values[0] if trial.values else None
    return (first is None, first if first is not None else 0.0, trial.number)


def study_table(study: Any, spec: SearchSpec) -> str:
    """Every trial of the study, best first: number, state, objectives, parameters."""
    header = " | ".join(spec.metrics)
    lines = [
        f"| trial | state | {header} | params |",
        "|---:|---|" + "---:|" * len(spec.metrics) + "---|",
    ]
    sign = -1 if spec.modes[0] == "max" else 1
    trials = sorted(
        _shown_trials(study),
        key=lambda t: (_rank(t)[0], sign * _rank(t)[1], t.number),
    )
    for trial in trials:
        values = " | ".join(_values(trial, spec))
        params = _shown(dotted_params(trial.params))
        lines.append(f"| {trial.number} | {trial.state.name} | {values} | {params} |")
    return "\n".join(lines)


def pareto_table(study: Any, spec: SearchSpec) -> str:
    """The trials on the Pareto front of a multi-objective study (by the first objective)."""
    header = " | ".join(spec.metrics)
    lines = [f"| trial | {header} | params |", "|---:|" + "---:|" * len(spec.metrics) + "---|"]
    for trial in sorted(study.best_trials, key=_rank):
        values = " | ".join(_values(trial, spec))
        lines.append(f"| {trial.number} | {values} | {_shown(dotted_params(trial.params))} |")
    return "\n".join(lines)


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{plain_text(key)}={value:.3g}"
        if isinstance(value, float)
        else f"{plain_text(key)}={plain_text(value)}"
        for key, value in params.items()
    )


def study_figures(study: Any, spec: SearchSpec) -> dict[str, bytes]:
    """``{file name: PNG}`` of the figures the study can be drawn as (a figure that cannot be
    drawn, such as importances from fewer than two complete trials, is left out with a note)."""
    import matplotlib

    matplotlib.use("Agg")  # Optuna draws through pyplot; no GUI backend on a server
    import optuna.visualization.matplotlib as plots
    from matplotlib import pyplot
    from matplotlib.text import Text

    first = spec.metrics[0]
    many = spec.multi_objective
    target: dict[str, Any] = {"target": lambda t: t.values[0]} if many else {}
    wanted = {
        "param_importances.png": lambda: plots.plot_param_importances(
            study, target_name=first, **target
        ),
        "parallel_coordinate.png": lambda: plots.plot_parallel_coordinate(
            study, target_name=first, **target
        ),
    }
    if many:
        wanted["pareto_front.png"] = lambda: plots.plot_pareto_front(
            study, target_names=list(spec.metrics)
        )
        for index, metric in enumerate(spec.metrics):
            wanted[f"optimization_history_{metric}.png"] = functools.partial(
                plots.plot_optimization_history,
                study,
                target=lambda t, i=index: t.values[i],
                target_name=metric,
            )
    else:
        wanted["optimization_history.png"] = lambda: plots.plot_optimization_history(
            study, target_name=first
        )
    width = max(8.0, 1.6 * len(spec.space) + 3.0)  # a parallel axis per parameter
    figures = {}
    for name, draw in sorted(wanted.items()):
        try:
            with warnings.catch_warnings():  # Optuna's matplotlib backend is "experimental"
                warnings.simplefilter("ignore")
                axes = draw()
            figure = getattr(axes, "figure", None) or axes.flat[0].figure
            figure.set_size_inches(width if name.startswith("parallel") else 8.0, 5.0)
            for text in figure.findobj(Text) if name.startswith("parallel") else ():
                text.set_fontsize(min(text.get_fontsize(), 9))  # six long names fit
            figures[name] = png_bytes(figure)
            pyplot.close(figure)
        except (ValueError, RuntimeError, ZeroDivisionError) as err:
            logger.info("search %s: %s not drawn (%s)", spec.name, name, err)
    return figures


__all__ = [
    "LEFT_OUT_ATTR",
    "checked_study",
    "pareto_table",
    "plain_text",
    "study_figures",
    "study_table",
]
