"""``linc-train``: one local training run with the plain ``fit`` loop (no Ray).

Examples:
    linc-train --problem cvrptw --size 20 --minutes 5
    linc-train --protocol ablation --preset full_linc --epochs 50      # Solomon-50, as the paper

``--protocol ablation`` trains and evaluates on the 56 Solomon instances truncated to their first
50 customers with the ablation's schedule (reference section 5: K = 128, batch 56, tau 100 ->
0.01 over the first 15%, best-only from 15%) and, unless ``--init linc``, the reference
implementation's initial weights for the seed: ``--seed 1234`` starts from the weights behind
the reference's published CPU curves (``reference_cpu_training_curves.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from linc_core.config import PRESETS, replace, to_dict, variant_configs
from linc_core.evaluate.benchmark_sets import solomon50
from linc_core.instances import Instance
from linc_core.model.reference_format import reference_initialisation_unsupported
from linc_core.runtime import tune_cpu_allocator
from linc_core.seeding import derive_seed
from linc_core.train.data import FixedData, GeneratedData, generate
from linc_core.train.loop import (
    PrintProgress,
    fit,
    initial_policy,
    policy_from_checkpoint,
    warm_start,
)

ABLATION_PROTOCOL = {
    "num_rollouts": 128,
    "batch_size": 56,
    "instances_per_epoch": 56,
    "tau_start": 100.0,
    "tau_end": 0.01,
    "tau_anneal_ratio": 0.15,
    "best_only_start_ratio": 0.15,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="linc-train", description=__doc__.splitlines()[0])
    p.add_argument("--problem", choices=("cvrptw", "cvrp", "tsp"), default="cvrptw")
    p.add_argument("--size", type=int, default=20, help="customers (cities) per instance")
    p.add_argument("--preset", choices=sorted(PRESETS), default="full_linc")
    p.add_argument("--protocol", choices=("generated", "ablation"), default="generated")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--minutes", type=float, default=None, help="stop after this wall time")
    p.add_argument("--rollouts", type=int, default=None, help="K")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--instances-per-epoch", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--validation-size", type=int, default=64)
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
        choices=("linc", "reference"),
        default=None,
        help="initial weights: linc (PyTorch defaults under a derived seed) or reference (the "
        "reference implementation's for --seed); default reference under --protocol ablation",
    )
    p.add_argument("--out", type=Path, default=None, help="checkpoint folder")
    p.add_argument("--resume", type=Path, default=None, help="checkpoint to resume from")
    p.add_argument(
        "--warm-start",
        type=Path,
        default=None,
        help="linc checkpoint whose matching weights seed the model",
    )
    p.add_argument("--morph-from", type=Path, default=None, help="reference policy checkpoint")
    p.add_argument("--morph-epochs", type=int, default=100, help="lambda 0 -> 1 over these epochs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tune_cpu_allocator()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides: dict = {
        "seed": args.seed,
        "init": args.init or "linc",
        "device": args.device,
        "validation_every": args.validation_every,
    }
    if args.protocol == "ablation":
        if args.problem != "cvrptw":
            raise SystemExit("--protocol ablation is a CVRPTW protocol")
        overrides |= ABLATION_PROTOCOL | {"epochs": 2000, "validation_size": 0}
    else:
        overrides |= {
            "num_rollouts": 64,
            "batch_size": 32,
            "instances_per_epoch": 640,
            "epochs": 100,
        }
    for flag, key in (
        ("epochs", "epochs"),
        ("rollouts", "num_rollouts"),
        ("batch_size", "batch_size"),
        ("instances_per_epoch", "instances_per_epoch"),
        ("lr", "learning_rate"),
    ):
        if getattr(args, flag) is not None:
            overrides[key] = getattr(args, flag)
    model_config, train_config = variant_configs(args.preset, args.problem, train=overrides)
    if (
        args.init is None
        and args.protocol == "ablation"
        and reference_initialisation_unsupported(model_config) is None
    ):
        train_config = replace(train_config, init="reference")
    if args.protocol == "ablation":
        instances = Instance.concat(solomon50())
        data = FixedData(instances, train_config.batch_size, derive_seed(args.seed, "data"))
        validation = instances
        data_id = "solomon100-first50"
    else:
        data = GeneratedData(
            args.problem,
            args.size,
            train_config.batch_size,
            train_config.instances_per_epoch,
            derive_seed(args.seed, "data"),
        )
        validation = (
            generate(
                args.problem,
                args.validation_size,
                args.size,
                derive_seed(args.seed, "validation-set"),
            )
            if args.validation_size
            else None
        )
        data_id = f"generated-{args.problem}-{args.size}"
    if train_config.multi_start:
        per_instance = validation.num_customers if validation is not None else args.size
        train_config = replace(
            train_config, num_rollouts=min(train_config.num_rollouts, per_instance)
        )
    print(
        json.dumps(
            {"preset": args.preset, "model": to_dict(model_config), "train": to_dict(train_config)}
        )
    )
    morph_reference = None
    if args.morph_from is not None:
        morph_reference, _ = policy_from_checkpoint(args.morph_from, args.device)
        train_config = replace(train_config, morph_epochs=args.morph_epochs)
    policy = initial_policy(model_config, train_config)
    if args.warm_start is not None:
        source, _ = policy_from_checkpoint(args.warm_start)
        copied = warm_start(policy, source)
        print(f"warm start: {len(copied)} tensors from {args.warm_start}")
    started = time.perf_counter()
    result = fit(
        policy,
        train_config,
        data,
        validation=validation,
        callbacks=[PrintProgress()],
        checkpoint_dir=args.out,
        resume_from=args.resume,
        max_seconds=args.minutes * 60 if args.minutes else None,
        data_id=data_id,
        morph_reference=morph_reference,
    )
    last = result.history[-1]
    print(
        f"done: {result.epochs_done} epochs, {result.global_step} steps, "
        f"{time.perf_counter() - started:.1f}s; final train best-of-K {last['train_best_cost']:.4f}"
        + (f", validation {last['validation_cost']:.4f}" if "validation_cost" in last else "")
    )
    if result.last_checkpoint is not None:
        print(f"checkpoint: {result.last_checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
