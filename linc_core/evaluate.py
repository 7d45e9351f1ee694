"""Benchmark evaluation: decode, verify every solution, gaps vs BKS and PyVRP, tables and plots.

    linc-eval --checkpoint runs/x/latest.pt --benchmark solomon100 --decode sampling --z 800 --aug 8
    linc-eval --checkpoint ... --benchmark path/to/homberger200 --decode sgbs --out runs/eval-hg

Benchmark sets (``load_benchmark``):

- ``solomon100`` (56, DIMACS convention, BKS: distance-only), ``solomon50`` (the same files cut
  to their first 50 customers: the ablation set; no BKS), ``tsplib`` (29, nint), ``cvrplib_x``
  and ``xml100`` (nint; ``--limit`` takes the first files by name);
- ``synthetic-PROBLEM-SIZE`` (e.g. ``synthetic-cvrptw-100``): ``--count`` instances from the
  training generator, seeded by ``--data-seed`` (exact convention, no BKS);
- any other value is a folder of Solomon-format files (Homberger-200 has that format); a
  ``bks.csv`` in it with an ``instance`` column and a cost column is used when present. A file
  that cannot be read becomes an error row naming the file; the rest are evaluated.

Every solution goes through ``verify.verify_instance`` under the set's convention: an
infeasible one is an error row (its violations spelled out), never dropped. Gaps:
``gap = 100 (cost - bks) / bks`` per instance; ``mean_gap`` is their mean and
``aggregate_gap = 100 (sum cost - sum bks) / sum bks`` over the instances that have both.
The same against PyVRP solutions (``--pyvrp-seconds S``), computed once per instance
and time budget and cached as Parquet under ``$LINC_CACHE_DIR`` (default ``~/.cache/linc``;
the benchmark data folder is read-only).

Outputs in ``--out``: ``rows.csv`` and ``rows.parquet`` (one row per instance), ``table.md``
(method, Obj., Gap, Time, as the paper's tables), ``summary.json`` and ``plots/NAME.png`` route
plots; every file is written to a temporary name and renamed into place. The exit status is 1
when any row is an error (unreadable file or infeasible solution), else 0.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from linc_core.atomic import write_atomic
from linc_core.benchmarks import data_dir, get_benchmark, list_instances, load_bks
from linc_core.decode import DecodeConfig, decode
from linc_core.instances import Instance, InstanceError, read_solomon_folder, truncate_customers
from linc_core.verify import convention_for, verify_instance

CACHE_DIR_ENV = "LINC_CACHE_DIR"
SYNTHETIC = re.compile(r"^synthetic-(tsp|cvrp|cvrptw)-(\d+)$")
# Cost columns recognised in a folder's bks.csv, in order of preference.
FOLDER_BKS_COLUMNS = ("bks_distance_only_dimacs", "bks", "optimal", "optimal_cost", "cost")


# ====================================================================== benchmark sets
@dataclass(frozen=True)
class BenchmarkSet:
    """Instances of one benchmark, ready to evaluate.

    Attributes:
        name: set name (or folder path).
        convention: distance convention of its costs (``verify.CONVENTIONS``).
        instances: B = 1 instances in float64 (file order).
        bks: best-known cost per instance name (missing names have none).
        errors: ``(file name, message)`` of every file that could not be read.
    """

    name: str
    convention: str
    instances: list[Instance]
    bks: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)


def load_benchmark(
    name: str,
    *,
    limit: int | None = None,
    count: int = 128,
    data_seed: int = 0,
    root: str | os.PathLike[str] | None = None,
) -> BenchmarkSet:
    """A named set (module docstring) or a folder of Solomon-format files.

    Args:
        limit: keep the first ``limit`` instances (file order).
        count, data_seed: size and seed of a ``synthetic-*`` set.
        root: data folder (default ``benchmarks.data_dir()``).
    """
    synthetic = SYNTHETIC.match(name)
    if synthetic:
        from linc_core.train.data import generate

        problem, size = synthetic.group(1), int(synthetic.group(2))
        batch = generate(problem, count, size, data_seed).to(dtype=torch.float64)
        names = [f"{name}-s{data_seed}-{i:05d}" for i in range(batch.batch_size)]
        batch = Instance(**{**_fields(batch), "names": tuple(names)})
        instances = [batch.select([i]) for i in range(batch.batch_size)]
        return BenchmarkSet(name, "exact", instances[:limit])
    if name in ("solomon100", "solomon50"):
        folder = Path(root) if root is not None else data_dir()
        loaded = _solomon_folder(folder / "solomon100", name, limit)
        if name == "solomon50":
            instances = [truncate_customers(i, 50) for i in loaded.instances]
            return BenchmarkSet(name, "dimacs", instances, {}, loaded.errors)
        return BenchmarkSet(
            name, "dimacs", loaded.instances, load_bks("solomon100", root), loaded.errors
        )
    if name in ("tsplib", "cvrplib_x", "xml100"):
        spec = get_benchmark(name)
        instances, errors = [], []
        for path in list_instances(name, root)[:limit]:
            try:
                instances.append(spec.read(path))
            except (InstanceError, OSError) as err:
                errors.append((path.name, str(err)))
        return BenchmarkSet(name, spec.convention, instances, load_bks(name, root), errors)
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise ValueError(
            f"--benchmark {name!r}: not a known set (solomon100, solomon50, tsplib, cvrplib_x, "
            "xml100, synthetic-PROBLEM-SIZE) and not a folder of Solomon-format files"
        )
    return _solomon_folder(folder, str(folder), limit)


def _fields(instance: Instance) -> dict:
    return {f: getattr(instance, f) for f in instance.__dataclass_fields__}


def _solomon_folder(folder: Path, name: str, limit: int | None) -> BenchmarkSet:
    instances, failures = read_solomon_folder(folder)
    errors = [(path.name, str(err)) for path, err in failures]
    return BenchmarkSet(
        name, convention_for("solomon"), instances[:limit], _folder_bks(folder), errors
    )


def _folder_bks(folder: Path) -> dict[str, float]:
    """Best-known costs from ``folder/bks.csv`` when it has a recognised cost column."""
    path = folder / "bks.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        column = next((c for c in FOLDER_BKS_COLUMNS if c in header), None)
        if "instance" not in header or column is None:
            raise InstanceError(
                str(path), "header", header, f"needs 'instance' and one of {FOLDER_BKS_COLUMNS}"
            )
        table = {}
        for row in reader:
            try:
                table[row["instance"]] = float(row[column])
            except (TypeError, ValueError):
                raise InstanceError(
                    str(path), f"{column}[{row['instance']}]", row[column], "not a number"
                ) from None
    return table


# ====================================================================== PyVRP cost cache
def cache_dir() -> Path:
    """``$LINC_CACHE_DIR`` or ``~/.cache/linc``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "linc").expanduser()


PYVRP_CACHE_SCHEMA = pa.schema(
    [
        ("instance", pa.string()),
        ("fingerprint", pa.string()),
        ("cost", pa.float64()),
        ("feasible", pa.bool_()),
        ("runtime", pa.float64()),
        ("routes", pa.list_(pa.list_(pa.int64()))),
    ]
)


def pyvrp_costs(
    instances: Sequence[Instance],
    convention: str,
    seconds: float,
    *,
    seed: int = 0,
    cache: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """PyVRP cost per instance name, solved once and cached as Parquet.

    The cache file is ``<cache>/pyvrp/<convention>-<seconds>s-seed<seed>.parquet``, one row per
    (name, data fingerprint); missing instances are solved and the file is rewritten
    atomically. Infeasible or failed solves are left out of the result.
    """
    from linc_core.pyvrp_solver import PyVRPError, solve_with_pyvrp

    folder = (cache or cache_dir()) / "pyvrp"
    path = folder / f"{convention}-{seconds:g}s-seed{seed}.parquet"
    rows: dict[tuple[str, str], dict] = {}
    if path.is_file():
        for row in pq.read_table(path).to_pylist():
            rows[(row["instance"], row["fingerprint"])] = row
    added = False
    out: dict[str, float] = {}
    for instance in instances:
        name = instance.names[0] if instance.names else "instance"
        key = (name, instance.fingerprint())
        if key not in rows:
            if log is not None:
                log(f"PyVRP {name}: {seconds:g} s")
            try:
                solution = solve_with_pyvrp(
                    instance, seconds=seconds, seed=seed, convention=convention
                )
                rows[key] = {
                    "instance": name,
                    "fingerprint": key[1],
                    "cost": solution.cost,
                    "feasible": solution.feasible,
                    "runtime": solution.runtime,
                    "routes": solution.routes,
                }
            except PyVRPError:
                rows[key] = {
                    "instance": name,
                    "fingerprint": key[1],
                    "cost": math.nan,
                    "feasible": False,
                    "runtime": seconds,
                    "routes": [],
                }
            added = True
        if rows[key]["feasible"]:
            out[name] = float(rows[key]["cost"])
    if added:
        table = pa.Table.from_pylist(list(rows.values()), schema=PYVRP_CACHE_SCHEMA)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        write_atomic(path, sink.getvalue().to_pybytes())
    return out


# ====================================================================== scoring
@dataclass
class EvalRow:
    """One instance's result. ``error`` is set when the file was unreadable or the solution
    broke a constraint; its cost is then not counted in any mean or gap."""

    instance: str
    method: str
    n_customers: int | None
    feasible: bool
    cost: float
    cost_exact: float
    num_routes: int
    bks: float
    gap_pct: float
    pyvrp_cost: float
    pyvrp_gap_pct: float
    seconds: float
    error: str = ""


def _gap(cost: float, base: float) -> float:
    if not (math.isfinite(cost) and math.isfinite(base)) or base == 0:
        return math.nan
    return 100.0 * (cost - base) / base


def score_solutions(
    instances: Sequence[Instance],
    solutions: Sequence[Sequence[Sequence[int]]],
    *,
    convention: str,
    method: str,
    bks: Mapping[str, float] | None = None,
    pyvrp: Mapping[str, float] | None = None,
    seconds: Sequence[float] | None = None,
) -> list[EvalRow]:
    """Verify one solution per B = 1 instance and build its report row.

    Args:
        instances: the instances as read (float64 recommended for exact re-scoring).
        solutions: verifier-format solutions (``verify.verify_routes``), one per instance.
        convention: cost convention of the set (also used for the time-window check).
        bks, pyvrp: best-known / PyVRP cost per instance name.
        seconds: decoding time attributed to each instance.
    """
    rows = []
    for i, (instance, solution) in enumerate(zip(instances, solutions, strict=True)):
        name = instance.names[0] if instance.names else f"row{i}"
        checked = verify_instance(instance, 0, solution, convention=convention)
        exact = verify_instance(instance, 0, solution, convention="exact")
        error = ""
        if not checked.feasible:
            details = "; ".join(f"{v.kind}: {v.detail}" for v in checked.violations[:5])
            extra = len(checked.violations) - 5
            error = f"infeasible ({details}{f'; +{extra} more' if extra > 0 else ''})"
        cost = checked.cost if checked.feasible else math.nan
        best_known = float((bks or {}).get(name, math.nan))
        pyvrp_cost = float((pyvrp or {}).get(name, math.nan))
        rows.append(
            EvalRow(
                instance=name,
                method=method,
                n_customers=instance.num_customers,
                feasible=checked.feasible,
                cost=cost,
                cost_exact=exact.cost if checked.feasible else math.nan,
                num_routes=checked.num_routes,
                bks=best_known,
                gap_pct=_gap(cost, best_known),
                pyvrp_cost=pyvrp_cost,
                pyvrp_gap_pct=_gap(cost, pyvrp_cost),
                seconds=float(seconds[i]) if seconds is not None else math.nan,
                error=error,
            )
        )
    return rows


def error_rows(errors: Sequence[tuple[str, str]], method: str) -> list[EvalRow]:
    """Rows for files that could not be read (named by file)."""
    nan = math.nan
    return [
        EvalRow(
            name, method, None, False, nan, nan, 0, nan, nan, nan, nan, nan, f"unreadable: {msg}"
        )
        for name, msg in errors
    ]


def summarize(rows: Sequence[EvalRow], seconds: float, rollouts: int = 0) -> dict:
    """Means and aggregate gaps over the feasible rows (errors counted, not averaged)."""
    ok = [r for r in rows if r.feasible]

    def gaps(attr: str, base: str) -> tuple[float, float, int]:
        have = [r for r in ok if math.isfinite(getattr(r, base))]
        if not have:
            return math.nan, math.nan, 0
        mean_gap = float(np.mean([getattr(r, attr) for r in have]))
        total = sum(getattr(r, base) for r in have)
        aggregate = _gap(sum(r.cost for r in have), total)
        return mean_gap, aggregate, len(have)

    mean_gap, aggregate_gap, with_bks = gaps("gap_pct", "bks")
    pyvrp_gap, pyvrp_aggregate, with_pyvrp = gaps("pyvrp_gap_pct", "pyvrp_cost")
    pyvrp_known = [r.pyvrp_cost for r in ok if math.isfinite(r.pyvrp_cost)]
    known = [r.bks for r in ok if math.isfinite(r.bks)]
    return {
        "instances": len(rows),
        "feasible": len(ok),
        "errors": len(rows) - len(ok),
        "mean_cost": float(np.mean([r.cost for r in ok])) if ok else math.nan,
        "mean_cost_exact": float(np.mean([r.cost_exact for r in ok])) if ok else math.nan,
        "mean_bks": float(np.mean(known)) if known else math.nan,
        "mean_gap_pct": mean_gap,
        "aggregate_gap_pct": aggregate_gap,
        "instances_with_bks": with_bks,
        "mean_pyvrp_cost": float(np.mean(pyvrp_known)) if pyvrp_known else math.nan,
        "mean_pyvrp_gap_pct": pyvrp_gap,
        "aggregate_pyvrp_gap_pct": pyvrp_aggregate,
        "instances_with_pyvrp": with_pyvrp,
        "seconds": seconds,
        "rollouts": rollouts,
        "rollouts_per_second": rollouts / seconds if seconds > 0 else math.nan,
    }


@dataclass
class Evaluation:
    """Rows and summary of one evaluated method on one set; ``solutions`` by instance name."""

    rows: list[EvalRow]
    summary: dict
    solutions: dict[str, list[list[int]]]


def evaluate_policy(
    policy: torch.nn.Module,
    instances: Instance | Sequence[Instance],
    config: DecodeConfig,
    *,
    convention: str = "exact",
    bks: Mapping[str, float] | Sequence[float] | None = None,
    pyvrp: Mapping[str, float] | None = None,
    method: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> Evaluation:
    """Decode, verify and score instances: the library entry point of evaluation.

    Args:
        policy: a ``LincPolicy``.
        instances: a batch (any size) or a list of batches; instances of different sizes are
            decoded in separate groups. Unnamed rows are called ``row0``, ``row1``, ...
        config: decoding method and budget.
        convention: cost convention of the scores and gaps.
        bks: best-known cost by instance name, or one per instance in order.
        pyvrp: PyVRP cost by instance name.
        progress: called with rollouts completed (drives a progress bar).
    """
    singles = _as_singles(instances)
    names = [s.names[0] for s in singles]
    if bks is not None and not isinstance(bks, Mapping):
        values = list(bks)
        if len(values) != len(singles):
            raise ValueError(f"bks: {len(values)} values for {len(singles)} instances")
        bks = dict(zip(names, (float(v) for v in values), strict=True))
    label = method or f"LINC {config.label}"
    solutions: list[list[list[int]] | None] = [None] * len(singles)
    seconds = [0.0] * len(singles)
    total_seconds, rollouts = 0.0, 0
    for size in sorted({s.num_nodes for s in singles}):
        members = [i for i, s in enumerate(singles) if s.num_nodes == size]
        batch = Instance.concat([singles[i] for i in members])
        result = decode(policy, batch, config, progress=progress)
        total_seconds += result.seconds
        rollouts += result.rollouts
        for j, i in enumerate(members):
            solutions[i] = result.routes[j]
            seconds[i] = result.seconds / len(members)
    rows = score_solutions(
        singles,
        solutions,
        convention=convention,
        method=label,
        bks=bks,
        pyvrp=pyvrp,
        seconds=seconds,
    )
    return Evaluation(
        rows,
        summarize(rows, total_seconds, rollouts),
        dict(zip(names, solutions, strict=True)),
    )


def _as_singles(instances: Instance | Sequence[Instance]) -> list[Instance]:
    batches = [instances] if isinstance(instances, Instance) else list(instances)
    singles, counter = [], 0
    for batch in batches:
        for b in range(batch.batch_size):
            single = batch.select([b])
            if single.names is None:
                single = Instance(**{**_fields(single), "names": (f"row{counter}",)})
            singles.append(single)
            counter += 1
    return singles


# ====================================================================== outputs
def rows_csv(rows: Sequence[EvalRow]) -> bytes:
    buffer = io.StringIO()
    names = list(EvalRow.__dataclass_fields__)
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(asdict(row))
    return buffer.getvalue().encode()


def rows_parquet(rows: Sequence[EvalRow]) -> bytes:
    table = pa.Table.from_pylist([asdict(r) for r in rows])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def format_seconds(seconds: float) -> str:
    """The paper's time style: ``0.9s``, ``6s``, ``2m``, ``1h``."""
    if not math.isfinite(seconds):
        return "--"
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def _pct(value: float) -> str:
    return f"{value:.2f}%" if math.isfinite(value) else "--"


def _obj(value: float, convention: str) -> str:
    if not math.isfinite(value):
        return "--"
    return f"{value:.1f}" if convention in ("dimacs", "tsplib", "cvrplib") else f"{value:.3f}"


def markdown_table(
    set_name: str,
    convention: str,
    summaries: Sequence[tuple[str, dict]],
    pyvrp_row: tuple[str, float, float] | None = None,
) -> str:
    """A paper-shaped table: Method | Obj. | Gap | Time (plus Gap vs PyVRP and errors).

    Obj. is the mean cost over feasible instances under ``convention``; Gap is the mean
    per-instance gap to the BKS (aggregate gap in the notes). ``pyvrp_row`` is PyVRP's own
    row: ``(label, mean cost, seconds)``.
    """
    lines = [
        f"**{set_name}** ({convention} costs)",
        "",
        "| Method | Obj. | Gap | Gap vs PyVRP | Time | Errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    first = summaries[0][1] if summaries else {}
    if first and math.isfinite(first.get("mean_bks", math.nan)):
        lines.append(f"| BKS | {_obj(first['mean_bks'], convention)} | -- | -- | -- | -- |")
    if pyvrp_row is not None:
        label, mean_cost, seconds = pyvrp_row
        obj, time_text = _obj(mean_cost, convention), format_seconds(seconds)
        lines.append(f"| {label} | {obj} | -- | -- | {time_text} | -- |")
    for method, s in summaries:
        lines.append(
            f"| {method} | {_obj(s['mean_cost'], convention)} | {_pct(s['mean_gap_pct'])} | "
            f"{_pct(s['mean_pyvrp_gap_pct'])} | {format_seconds(s['seconds'])} | "
            f"{s['errors']}/{s['instances']} |"
        )
    for method, s in summaries:
        lines.append("")
        lines.append(
            f"{method}: {s['feasible']}/{s['instances']} feasible; mean gap "
            f"{_pct(s['mean_gap_pct'])}, aggregate gap {_pct(s['aggregate_gap_pct'])} vs BKS "
            f"({s['instances_with_bks']} instances); vs PyVRP mean "
            f"{_pct(s['mean_pyvrp_gap_pct'])}, aggregate "
            f"{_pct(s['aggregate_pyvrp_gap_pct'])} ({s['instances_with_pyvrp']}); "
            f"{s['rollouts']} rollouts, {s['rollouts_per_second']:.0f} rollouts/s."
        )
    return "\n".join(lines) + "\n"


def plot_routes(instance: Instance, solution: Sequence[Sequence[int]], title: str) -> bytes:
    """PNG bytes of one solution: depot square, customers, one colour per route."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    locs = instance.locs[0].detach().cpu().double().numpy()
    figure = Figure(figsize=(6, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    cmap = matplotlib.colormaps["tab20"]
    for r, route in enumerate(solution):
        path = [*route, route[0]] if instance.problem == "tsp" else [0, *route, 0]
        xy = locs[path]
        axes.plot(xy[:, 0], xy[:, 1], "-", color=cmap(r % 20), linewidth=1.2)
    start = 1 if instance.has_depot else 0
    axes.scatter(locs[start:, 0], locs[start:, 1], s=10, color="black", zorder=3)
    if instance.has_depot:
        axes.scatter(locs[:1, 0], locs[:1, 1], s=80, marker="s", color="red", zorder=4)
    axes.set_title(title, fontsize=9)
    axes.set_aspect("equal")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


# ====================================================================== command line
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="linc-eval", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--benchmark", required=True, help="set name or folder of Solomon files")
    p.add_argument(
        "--decode", choices=("greedy", "sampling", "sgbs", "multistart"), default="sampling"
    )
    p.add_argument("--z", type=int, default=800, help="z-vectors (rollouts) per augmented copy")
    p.add_argument("--aug", type=int, choices=(1, 8), default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--beam", type=int, default=4, help="SGBS beam width")
    p.add_argument("--expansion", type=int, default=4, help="SGBS children per beam")
    p.add_argument("--sgbs-z", type=int, default=128, help="SGBS initial greedy z-rollouts")
    p.add_argument("--starts", type=int, default=None, help="multistart starts (default all)")
    p.add_argument("--max-rollouts-per-chunk", type=int, default=16384)
    p.add_argument("--limit", type=int, default=None, help="first N instances only")
    p.add_argument("--count", type=int, default=128, help="synthetic set size")
    p.add_argument("--data-seed", type=int, default=0, help="synthetic set seed")
    p.add_argument(
        "--pyvrp-seconds",
        type=float,
        default=0.0,
        help="PyVRP budget per instance (0: no PyVRP row or gap); cached in $LINC_CACHE_DIR",
    )
    p.add_argument("--plot", default="3", help="route plots: a count (first N) or names a,b")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    return p


def _plot_names(spec: str, names: Sequence[str]) -> list[str]:
    if spec.isdigit():
        return list(names[: int(spec)])
    wanted = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise SystemExit(f"--plot: unknown instances {unknown}")
    return wanted


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from tqdm import tqdm

    from linc_core.runtime import tune_cpu_allocator
    from linc_core.train.loop import policy_from_checkpoint

    tune_cpu_allocator()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = DecodeConfig(
        method=args.decode,
        num_z=args.z,
        augment=args.aug,
        seed=args.seed,
        num_starts=args.starts,
        beam_width=args.beam,
        expansion=args.expansion,
        sgbs_z=args.sgbs_z,
        max_rollouts_per_chunk=args.max_rollouts_per_chunk,
    )
    policy, _ = policy_from_checkpoint(args.checkpoint, args.device)
    bench = load_benchmark(
        args.benchmark, limit=args.limit, count=args.count, data_seed=args.data_seed
    )
    for file_name, message in bench.errors:
        print(f"error: {file_name}: {message}", file=sys.stderr)
    if bench.instances and bench.instances[0].problem != policy.config.problem:
        raise SystemExit(
            f"--checkpoint is a {policy.config.problem} model; --benchmark {args.benchmark} "
            f"holds {bench.instances[0].problem} instances"
        )
    out = args.out or Path("runs") / "eval" / f"{Path(bench.name).name}-{args.decode}"
    pyvrp, pyvrp_seconds = None, math.nan
    if args.pyvrp_seconds > 0 and bench.instances:
        pyvrp = pyvrp_costs(bench.instances, bench.convention, args.pyvrp_seconds, log=print)
        pyvrp_seconds = args.pyvrp_seconds * len(bench.instances)
    method = f"LINC {config.label}"
    evaluation = Evaluation([], summarize([], 0.0), {})
    if bench.instances:
        bar = tqdm(
            total=_planned_rollouts(config, bench.instances, policy.config.z_dim),
            unit="rollout",
            unit_scale=True,
            disable=args.no_progress,
            desc=f"{Path(bench.name).name} {config.label}",
        )
        with bar:
            evaluation = evaluate_policy(
                policy,
                bench.instances,
                config,
                convention=bench.convention,
                bks=bench.bks,
                pyvrp=pyvrp,
                method=method,
                progress=bar.update,
            )
    rows = evaluation.rows + error_rows(bench.errors, method)
    summary = summarize(rows, evaluation.summary["seconds"], evaluation.summary["rollouts"])
    pyvrp_row = None
    if pyvrp:
        pyvrp_row = (
            f"PyVRP ({args.pyvrp_seconds:g}s)",
            float(np.mean(list(pyvrp.values()))),
            pyvrp_seconds,
        )
    table = markdown_table(Path(bench.name).name, bench.convention, [(method, summary)], pyvrp_row)
    write_atomic(out / "rows.csv", rows_csv(rows))
    write_atomic(out / "rows.parquet", rows_parquet(rows))
    write_atomic(out / "table.md", table.encode())
    record = {"benchmark": bench.name, "checkpoint": str(args.checkpoint), "decode": asdict(config)}
    write_atomic(out / "summary.json", json.dumps(record | summary, indent=2).encode())
    by_name = {i.names[0]: i for i in bench.instances}
    for name in _plot_names(args.plot, [r.instance for r in evaluation.rows]):
        row = next(r for r in evaluation.rows if r.instance == name)
        title = f"{name}  {method}  cost {row.cost:.1f}" + ("" if row.feasible else "  INFEASIBLE")
        png = plot_routes(by_name[name], evaluation.solutions[name], title)
        write_atomic(out / "plots" / f"{name}.png", png)
    print(table)
    print(f"wrote {out}/rows.csv, rows.parquet, table.md, summary.json, plots/")
    return 1 if summary["errors"] else 0


def _planned_rollouts(
    config: DecodeConfig, instances: Sequence[Instance], z_dim: int
) -> int | None:
    if config.method == "sgbs":
        return None  # the number of simulations depends on the search
    per_copy = config.num_z
    if config.method == "multistart":
        per_copy = sum(
            i.num_customers
            if config.num_starts is None
            else min(config.num_starts, i.num_customers)
            for i in instances
        )
        return per_copy * config.augment
    if config.method == "greedy" and z_dim == 0:
        per_copy = 1
    return per_copy * config.augment * len(instances)


if __name__ == "__main__":
    raise SystemExit(main())
