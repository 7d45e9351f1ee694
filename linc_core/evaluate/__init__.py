"""Benchmark evaluation: decode, verify every solution, gaps vs BKS and PyVRP, tables and plots.

Modules, one job each:

- :mod:`~linc_core.evaluate.benchmark_sets`: ``BenchmarkSet``, ``load_benchmark`` (named,
  synthetic and folder sets), ``solomon50`` (the ablation set);
- :mod:`~linc_core.evaluate.pyvrp_cache`: PyVRP costs per instance, solved once and cached;
- :mod:`~linc_core.evaluate.scoring`: ``EvalRow``, ``score_solutions``, ``summarize``,
  ``family_gaps``, ``evaluate_policy`` (the library entry point);
- :mod:`~linc_core.evaluate.reporting`: rows as CSV/Parquet, the markdown table, route plots,
  strict-JSON summaries, ``.sol`` solution files;
- :mod:`~linc_core.evaluate.pyvrp_solver`: PyVRP reference solutions, verified;
- :mod:`~linc_core.evaluate.diagnostics`: the paper's mechanism diagnostics of a policy.

The ``linc-eval`` command is :mod:`linc_core.commands.evaluate`.
"""

from linc_core.evaluate.benchmark_sets import (
    FOLDER_BKS_COLUMNS,
    SOLOMON50_CUSTOMERS,
    SYNTHETIC,
    BenchmarkSet,
    load_benchmark,
    solomon50,
)
from linc_core.evaluate.pyvrp_cache import (
    CACHE_DIR_ENV,
    PYVRP_CACHE_SCHEMA,
    cache_dir,
    pyvrp_costs,
)
from linc_core.evaluate.reporting import (
    format_seconds,
    markdown_table,
    plot_routes,
    rows_csv,
    rows_parquet,
    solution_sol,
    summary_json,
)
from linc_core.evaluate.scoring import (
    EvalRow,
    Evaluation,
    error_rows,
    evaluate_policy,
    evaluate_set,
    family_gaps,
    planned_rollouts,
    score_solutions,
    summarize,
)

__all__ = [
    "CACHE_DIR_ENV",
    "FOLDER_BKS_COLUMNS",
    "PYVRP_CACHE_SCHEMA",
    "SOLOMON50_CUSTOMERS",
    "SYNTHETIC",
    "BenchmarkSet",
    "EvalRow",
    "Evaluation",
    "cache_dir",
    "error_rows",
    "evaluate_policy",
    "evaluate_set",
    "family_gaps",
    "format_seconds",
    "load_benchmark",
    "markdown_table",
    "planned_rollouts",
    "plot_routes",
    "pyvrp_costs",
    "rows_csv",
    "rows_parquet",
    "score_solutions",
    "solomon50",
    "solution_sol",
    "summarize",
    "summary_json",
]
