"""Command-line flags shared by ``linc-eval`` and ``linc-diagnose``, each defined once.

Both commands load a checkpoint, decode a benchmark set with ``--z`` rollouts per instance
under a seed, on a device with a thread count, and write into an output folder; each command
states its own defaults and adds its own flags after these. A checkpoint or a set that cannot
be loaded, or an output folder that cannot be written (:func:`check_writable_folder`, which
``linc-train --out`` uses too), is a :class:`CommandLineError`: one line on stderr and exit 2,
never a traceback.
"""

from __future__ import annotations

import argparse
import errno
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from linc_core.utils.runtime import tune_cpu_allocator

if TYPE_CHECKING:
    from linc_core.evaluate.benchmark_sets import BenchmarkSet
    from linc_core.model import LincPolicy

# torch's CPU pool at most: beyond any machine's cores (a larger count overflows torch's int)
MAX_THREADS = 1024

BENCHMARK_HELP = (
    "set name (solomon100, solomon50, tsplib, cvrplib_x, xml100, synthetic-PROBLEM-SIZE) or a "
    "folder of benchmark files of one format (Solomon .txt, TSPLIB .tsp, CVRPLIB .vrp)"
)


def add_policy_run_flags(
    parser: argparse.ArgumentParser,
    *,
    benchmark: str | None,
    z: int | None,
    z_help: str,
    out: Path | None,
) -> None:
    """Add ``--checkpoint --benchmark --limit --z --seed --device --threads --out``.

    Args:
        parser: the command's parser.
        benchmark: default of ``--benchmark``; ``None`` makes the flag required.
        z: default of ``--z`` (None: the command picks one per method); ``z_help`` says what
            the z-rollouts are for in this command.
        out: default output folder (``None``: the command derives one).
    """
    parser.add_argument("--checkpoint", type=Path, required=True, help="linc checkpoint (.pt)")
    parser.add_argument(
        "--benchmark", required=benchmark is None, default=benchmark, help=BENCHMARK_HELP
    )
    parser.add_argument("--limit", type=int, default=None, help="first N instances only")
    parser.add_argument("--z", type=int, default=z, help=z_help)
    parser.add_argument("--seed", type=int, default=0, help="decoding seed")
    parser.add_argument("--device", default="cpu", help="torch device of the policy")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=out, help="output folder")


def check_policy_run_flags(args: argparse.Namespace) -> None:
    """The numbers of :func:`add_policy_run_flags` in range, before anything is loaded: an
    ``--limit`` below 1 would slice instances off the end (``-1``: all but the last), a
    ``--z`` of 0 would silently become the default."""
    require_int("--limit", args.limit, 1)
    require_int("--z", args.z, 1)


def apply_runtime_flags(args: argparse.Namespace) -> None:
    """Process settings from the flags: the CPU allocator tuning and ``--threads`` (refused
    in one line outside 1 to :data:`MAX_THREADS`), after ``--device`` is checked
    (:func:`require_device`)."""
    require_int("--threads", args.threads, 1, MAX_THREADS)
    require_device("--device", args.device)
    tune_cpu_allocator()
    if args.threads:
        torch.set_num_threads(args.threads)


class CommandLineError(Exception):
    """A command that cannot start (missing file, empty set): its one-line reason."""


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose refusal of a flag (``--z abc``, a missing ``--checkpoint``) is
    one line on stderr and exit 2, as every other refusal of the commands is, not the usage
    block before it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def require_flag(condition: bool, flag: str, value: object, expected: str) -> None:
    """Refuse a flag's value in one line, ``{flag} {value}: expected {expected}``, unless
    ``condition`` holds (the flags' counterpart of ``linc_core.utils.typed.require``)."""
    if not condition:
        raise CommandLineError(f"{flag} {value}: expected {expected}")


def require_int(flag: str, value: int | None, low: int, high: int | None = None) -> None:
    """An integer flag from ``low`` (to ``high``), or not given (``None``)."""
    if value is not None:
        within = low <= value and (high is None or value <= high)
        expected = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"
        require_flag(within, flag, value, expected)


def require_device(flag: str, value: str) -> None:
    """A device this process can run on: ``cpu``, or ``cuda[:N]`` with GPU N visible to this
    PyTorch (a CUDA device on a CPU-only build would fail later, blamed on the checkpoint)."""
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        device = None
    known = device is not None and device.type in ("cpu", "cuda")
    require_flag(known, flag, value, "cpu or cuda[:N]")
    if device.type == "cuda":
        count = torch.cuda.device_count()  # 0 on a CPU-only build or a machine without a GPU
        visible = f"{count} visible to this PyTorch" if count else "none visible to this PyTorch"
        require_flag((device.index or 0) < count, flag, value, f"a CUDA device ({visible})")


def require_seconds(flag: str, value: float | None) -> None:
    """A time budget: a finite number of seconds >= 0 (``nan`` and ``inf`` would run unbounded),
    or not given (``None``)."""
    if value is not None:
        require_flag(math.isfinite(value) and value >= 0, flag, value, "a finite number >= 0")


def require_distinct_z(flag: str, value: int, z_dim: int) -> None:
    """``value`` z-rollouts per copy, each under its own z-vector: at most the ``2^z_dim``
    vectors of the checkpoint's model (none is drawn when ``z_dim`` is 0)."""
    if z_dim > 0:
        expected = f"at most 2^{z_dim} = {2**z_dim}, the checkpoint's distinct z-vectors"
        require_flag(value <= 2**z_dim, flag, value, expected)


def check_writable_folder(flag: str, folder: Path) -> None:
    """Create ``folder`` if missing and write a probe file in it (deleted on close), so that a
    command refuses an output folder it cannot write before it works, not after: linc-train
    would otherwise fail on its first checkpoint, an epoch in. Any command's ``--out``.

    Raises:
        CommandLineError: ``{flag}: cannot write to {folder} ({reason})``, as linc-tune words
            its ``cluster.storage`` check.
    """
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise CommandLineError(f"{flag}: cannot write to {folder} ({reason})") from None


def load_policy(args: argparse.Namespace) -> tuple[LincPolicy, dict[str, Any]]:
    """The policy of ``--checkpoint`` on ``--device``, or a one-line :class:`CommandLineError`
    (a file holding anything but tensors and plain data is refused unrun)."""
    from linc_core.train.loop import policy_from_checkpoint
    from linc_core.utils.tensor_file import CheckpointError

    path: Path = args.checkpoint
    if not path.exists():
        raise CommandLineError(f"--checkpoint {path}: no such file")
    if path.is_dir():
        raise CommandLineError(f"--checkpoint {path}: a folder; give the checkpoint file (.pt)")
    try:
        return policy_from_checkpoint(path, args.device)
    except CheckpointError as err:  # names the file itself: say it once
        reason = " ".join(str(err).split()).removeprefix(f"checkpoint {path}: ")
        message = f"--checkpoint {path}: not a readable linc checkpoint ({reason})"
        raise CommandLineError(message) from None
    except Exception as err:  # a config the checkpoint holds, a state dict that does not fit
        reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        message = f"--checkpoint {path}: not a readable linc checkpoint ({reason})"
        raise CommandLineError(message) from None


def load_set(args: argparse.Namespace, **options: Any) -> BenchmarkSet:
    """The ``--benchmark`` set (first ``--limit`` files), or a one-line
    :class:`CommandLineError` when it is missing or holds no instance at all."""
    from linc_core.evaluate.benchmark_sets import (
        MAX_SYNTHETIC_NODES,
        SYNTHETIC,
        largest_customers,
        load_benchmark,
    )
    from linc_core.instances import InstanceError
    from linc_core.runs.plan import MAX_CUSTOMERS

    customers = largest_customers(args.benchmark)  # a synthetic set's size: before generating
    if customers is not None and customers > MAX_CUSTOMERS:
        expected = f"at most {MAX_CUSTOMERS} customers per instance, got {customers}"
        raise CommandLineError(f"--benchmark {args.benchmark}: expected {expected}")
    count = options.get("count")
    if count is not None and customers is not None and SYNTHETIC.match(args.benchmark):
        most = MAX_SYNTHETIC_NODES // (customers + 1)
        expected = f"at most {most} instances of {customers} customers (a synthetic set holds"
        require_flag(count <= most, "--count", count, f"{expected} {MAX_SYNTHETIC_NODES} nodes)")
    try:
        bench = load_benchmark(args.benchmark, limit=args.limit, **options)
    except (ValueError, InstanceError, OSError) as err:
        raise CommandLineError(str(err)) from None
    if not bench.instances and not bench.errors:
        others = f" ({len(bench.skipped)} other files skipped)" if bench.skipped else ""
        raise CommandLineError(f"--benchmark {args.benchmark}: no instance file in it{others}")
    return bench
