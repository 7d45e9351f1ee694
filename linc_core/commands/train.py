"""``linc-train``: one local training run with the plain ``fit`` loop (no Ray).

Examples:
    linc-train --problem cvrptw --size 20 --minutes 5                  # a 5-minute budget
    linc-train --protocol ablation --preset full_linc --epochs 50      # Solomon-50, as the paper

``--protocol ablation`` (``linc_core.runs.protocols``) trains and validates on the 56 Solomon
instances truncated to their first 50 customers with the ablation's schedule (reference section
5: K = 128, batch 56, tau 100 -> 0.01 over the first 15%, best-only from 15%) and, unless
``--init linc``, the reference implementation's initial weights for the seed: ``--seed 1234``
starts from the weights behind the reference's published CPU curves
(``reference_cpu_training_curves.json``). The flags are resolved once into a
``linc_core.runs.plan.RunPlan``, the same plan the platform's trials run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from linc_core.commands.flags import (
    CommandLineError,
    OneLineParser,
    apply_runtime_flags,
    check_writable_folder,
)
from linc_core.config import TrainConfig, to_dict
from linc_core.metrics import VALIDATION_COST
from linc_core.presets import PRESETS
from linc_core.problems.spec import problem_names
from linc_core.runs.memory import estimate_run_memory
from linc_core.runs.memory_limit import memory_limit
from linc_core.runs.plan import (
    DataSource,
    RunPlan,
    data_id,
    resolve_run,
    training_data,
    validation_set,
)
from linc_core.runs.protocols import PROTOCOLS, protocol_named
from linc_core.train.checkpoint import load_checkpoint
from linc_core.train.loop import (
    PrintProgress,
    fit,
    initial_policy,
    policy_from_checkpoint,
    warm_start,
)
from linc_core.train.memory_ceiling import HeapCeiling, heap_ceiling
from linc_core.utils.files import size_in_words
from linc_core.utils.runtime import resident_bytes
from linc_core.utils.tensor_file import CheckpointError
from linc_core.utils.typed import literal_values

# Flags that set a TrainConfig field when given (they win over the protocol's value).
TRAIN_FLAGS = {
    "epochs": "epochs",
    "minutes": "budget_minutes",
    "budget_clock": "budget_clock",
    "rollouts": "num_rollouts",
    "batch_size": "batch_size",
    "instances_per_epoch": "instances_per_epoch",
    "lr": "learning_rate",
    "validation_size": "validation_size",
    "init": "init",
    "compile": "compile",
}
# Flags named as their TrainConfig field, set by the command itself (not through TRAIN_FLAGS).
OTHER_TRAIN_FLAGS = ("seed", "device", "validation_every", "morph_epochs")

# The setting a refusal names, as the flag that set it: "--lr (train.learning_rate): ..."
FIELD_FLAGS = {f"train.{key}": f"--{flag.replace('_', '-')}" for flag, key in TRAIN_FLAGS.items()}
FIELD_FLAGS |= {f"train.{key}": f"--{key.replace('_', '-')}" for key in OTHER_TRAIN_FLAGS}
FIELD_FLAGS["num_customers"] = "--size"


def named_by_flag(message: str) -> str:
    """A settings refusal (``train.learning_rate: expected > 0, got -1.0``) naming the flag
    first (``--lr (train.learning_rate): ...``); other messages as they are."""
    setting, separator, rest = message.partition(": ")
    flag = FIELD_FLAGS.get(setting)
    return f"{flag} ({setting}): {rest}" if flag and separator else message


def check_memory(plan: RunPlan) -> HeapCeiling | None:
    """A CPU run this process can hold: the run's estimated peak
    (:func:`linc_core.runs.memory.estimate_run_memory`, the terms a sweep reserves per trial)
    at most the memory it may use (the machine's, or its cgroup's limit in a container:
    :func:`linc_core.runs.memory_limit.memory_limit`), else :class:`CommandLineError` naming
    the flags that size it (a batch far too large would otherwise end in a ``MemoryError`` or
    the kernel's OOM kill). Returns the callback that keeps the run under that memory as its
    heap grows (:class:`linc_core.train.memory_ceiling.HeapCeiling`); None off the CPU."""
    if plan.train.device != "cpu":
        return None
    # The process's own memory as it stands (torch imported: about 0.25 GiB), not the 1 GiB a
    # sweep reserves for a Ray worker's imports, which would refuse small runs that fit in a
    # 1 GiB container.
    resident = resident_bytes()
    needed, limit = estimate_run_memory(plan, base_bytes=resident), memory_limit()
    if needed > limit.size:
        train = plan.train
        sizes = f"--batch-size {train.batch_size} x --rollouts {train.num_rollouts}"
        raise CommandLineError(
            f"{sizes} at --size {plan.data.num_customers} needs about {size_in_words(needed)} "
            f"of memory; {limit.describe()} {size_in_words(limit.size)}"
        )
    return HeapCeiling(heap_ceiling(limit.size, needed, resident))


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="linc-train", description=__doc__.splitlines()[0])
    p.add_argument("--problem", choices=problem_names(), default="cvrptw")
    p.add_argument("--size", type=int, default=20, help="customers (cities) per instance")
    p.add_argument("--preset", choices=sorted(PRESETS), default="full_linc")
    p.add_argument("--protocol", choices=sorted(PROTOCOLS), default="generated")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="train for this many minutes (train.budget_minutes: the schedules follow the "
        "fraction spent, --epochs, when given, an upper bound; --resume keeps the checkpoint's)",
    )
    p.add_argument(
        "--budget-clock",
        choices=literal_values(TrainConfig, "budget_clock"),
        default=None,
        help="what --minutes count: wall (default) or cpu, the process's CPU seconds (runs "
        "sharing cores still get the same compute)",
    )
    p.add_argument("--rollouts", type=int, default=None, help="K")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--instances-per-epoch", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument(
        "--validation-size",
        type=int,
        default=None,
        help="generated validation instances (default 64; the ablation protocol validates on "
        "its training set)",
    )
    p.add_argument("--validation-every", type=int, default=1, help="epochs between validations")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (1 per run when runs share CPUs)",
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--init",
        choices=literal_values(TrainConfig, "init"),
        default=None,
        help="initial weights: linc (PyTorch defaults under a derived seed) or reference (the "
        "reference implementation's for --seed); default: the protocol's (reference under "
        "--protocol ablation, where the reference builds the model)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="torch.compile the decision and replay steps (train.compile; docs: GPU runs)",
    )
    p.add_argument("--out", type=Path, default=None, help="checkpoint folder")
    p.add_argument("--resume", type=Path, default=None, help="checkpoint to resume from")
    p.add_argument(
        "--warm-start",
        type=Path,
        default=None,
        help="linc checkpoint whose matching weights seed the model",
    )
    p.add_argument(
        "--morph-from",
        type=Path,
        default=None,
        help="checkpoint of the frozen policy whose scores morphing starts from",
    )
    p.add_argument("--morph-epochs", type=int, default=100, help="lambda 0 -> 1 over these epochs")
    return p


def plan_from_args(args: argparse.Namespace) -> RunPlan:
    """The run the flags describe: the protocol's data and schedule, the flags over it.

    Every random stream derives from ``--seed``: the batches from ``(seed, "data")``, the
    generated validation set from ``(seed, "validation-set")``.
    """
    protocol = protocol_named(args.protocol)
    train = {"seed": args.seed, "device": args.device, "validation_every": args.validation_every}
    train |= {key: getattr(args, flag) for flag, key in TRAIN_FLAGS.items()}
    train = {key: value for key, value in train.items() if value is not None}
    if args.morph_from is not None:
        train["morph_epochs"] = args.morph_epochs
    if args.resume is not None:  # a resumed run keeps its budget and the clock it counts on
        kept = load_checkpoint(args.resume)["train_config"]
        train.setdefault("budget_clock", kept.budget_clock)
        if args.minutes is None and kept.budget_minutes is not None:
            train["budget_minutes"] = kept.budget_minutes
            train.setdefault("epochs", kept.epochs)
    return resolve_run(
        args.preset,
        DataSource(protocol.data, args.problem, args.size),  # the stream follows --seed
        protocol=args.protocol,
        train=train,
        validation="training_set" if protocol.data == "solomon50" else "generated",
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _train(argv)
    # --resume, --warm-start or --morph-from (one line, unrun), or an --out it cannot write
    except (CheckpointError, CommandLineError) as err:
        print(f"linc-train: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


def _train(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    apply_runtime_flags(args)  # an impossible --threads is refused before any file is read
    try:
        plan = plan_from_args(args)
    except CheckpointError:  # --resume read for its budget: main names the file
        raise
    except ValueError as err:  # a ConfigError or a setting the configs refuse
        print(f"linc-train: {named_by_flag(str(err))}", file=sys.stderr)
        return 2
    ceiling = check_memory(plan)
    # Every file the run reads or writes is checked before anything is printed or trained
    # (--resume was, by plan_from_args). Building these policies draws from torch's global
    # generator, which nothing reads after initial_policy reseeds it (later draws are keyed).
    morph_from = source = None
    if args.morph_from is not None:
        morph_from, _ = policy_from_checkpoint(args.morph_from, args.device)
    if args.warm_start is not None:
        source, _ = policy_from_checkpoint(args.warm_start)
    if args.out is not None:
        check_writable_folder("--out", args.out)
    data = training_data(plan)
    validation = validation_set(plan, data)
    print(
        json.dumps(
            {"preset": args.preset, "model": to_dict(plan.model), "train": to_dict(plan.train)}
        )
    )
    policy = initial_policy(plan.model, plan.train)
    if source is not None:
        copied = warm_start(policy, source)
        print(f"warm start: {len(copied)} tensors from {args.warm_start}")
    started = time.perf_counter()
    result = fit(
        policy,
        plan.train,
        data,
        validation=validation,
        callbacks=[PrintProgress()] + ([ceiling] if ceiling is not None else []),
        checkpoint_dir=args.out,
        resume_from=args.resume,
        data_id=data_id(plan),
        morph_from=morph_from,
    )
    last = result.history[-1]
    print(
        f"done: {result.epochs_done} epochs, {result.global_step} steps, "
        f"{time.perf_counter() - started:.1f}s ({result.train_seconds:.1f}s training); "
        f"final train best-of-K {last['train_best_cost']:.4f}"
        + (f", validation {last['validation_cost']:.4f}" if VALIDATION_COST in last else "")
    )
    if result.last_checkpoint is not None:
        print(f"checkpoint: {result.last_checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
