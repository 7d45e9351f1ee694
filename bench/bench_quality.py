"""Time to quality against an external peer: rl4co's PolyNet and linc's models trained for the
same minutes on this machine, each validated on the same instances by linc's verifier.

    python -m bench --only quality [--quick]
    python -m bench.bench_quality --minutes 60 --out bench/results/quality_rl4co.json

Every model trains on CVRPTW n=50 envelope instances (linc's generator; rl4co's PolyNet
receives the same batches converted to its TensorDict: times in units of the horizon,
coordinates scaled so that its travel time is its distance, as its own generator scales them) with
batch 32 and K=64 rollouts, Adam 1e-4, one thread, for ``minutes`` of training steps counted
in CPU seconds of this process (``CLOCK``, as ``preset=main-cpu``'s trials count theirs, so that
a busy machine gives each model the same compute). The
validation set is 64 generated instances (seed 0): each model decodes it greedily with its K
rollouts (z- or poly-vectors; rl4co: its ``k`` poly vectors, ``multisample``) and keeps each
instance's best; linc's verifier checks every route set and gives its exact cost (a route set
it refuses counts as infeasible, its cost left out). The gap is to PyVRP's solution of the same
instance (1 s, cached). The row: the gap each reaches at the budget; ``--out`` writes rl4co's
curve (``[[train_seconds, gap %], ...]``) for ``linc-report main --peer-curve``.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from bench.bench_train import _plan
from bench.rl4co_peer import RL4CO_PEER, polynet, to_rl4co
from linc_core.decoding import DecodeConfig
from linc_core.evaluate import evaluate_policy, pyvrp_costs
from linc_core.instances import Instance
from linc_core.problems.base import actions_to_routes
from linc_core.train.budget import BUDGET_CLOCKS
from linc_core.train.data import GeneratedData, generate
from linc_core.verify import verify_instance

N, BATCH, ROLLOUTS, VALIDATION, PYVRP_SECONDS = 50, 32, 64, 64, 1.0
CLOCK = "cpu"  # what the budget's minutes count, for the peer and for linc's models alike


def validation_set() -> tuple[Instance, dict[str, float]]:
    """The 64 validation instances (named) and PyVRP's cost of each."""
    batch = generate("cvrptw", VALIDATION, N, 0)
    batch = replace(batch, names=tuple(f"quality-{i:03d}" for i in range(VALIDATION)))
    singles = [batch.select([i]) for i in range(VALIDATION)]
    return batch, pyvrp_costs(singles, "exact", PYVRP_SECONDS)


def gap_pct(costs: dict[str, float], reference: dict[str, float]) -> float:
    """Mean per-instance gap to PyVRP over the feasible instances (NaN: none)."""
    gaps = [100 * (c - reference[n]) / reference[n] for n, c in costs.items() if n in reference]
    return float(np.mean(gaps)) if gaps else math.nan


class Rl4coPolyNet:
    """rl4co's PolyNet (``bench.bench_train``'s peer, our sizes) trained on linc's batches."""

    def __init__(self, seed: int) -> None:
        sizes = _plan("polynet", BATCH, ROLLOUTS, N).model
        self.env, self.model = polynet(BATCH, ROLLOUTS, N, seed, sizes)
        self.optimizer = self.model.configure_optimizers()
        if isinstance(self.optimizer, tuple | list):  # Lightning's ([optimizers], [schedulers])
            self.optimizer = (
                self.optimizer[0][0] if isinstance(self.optimizer[0], list) else self.optimizer[0]
            )

    def step(self, batch: Instance) -> None:
        self.model.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self.model.shared_step(to_rl4co(batch), batch_idx=0, phase="train")
        self.optimizer.zero_grad(set_to_none=True)
        out["loss"].backward()
        self.optimizer.step()

    @torch.no_grad()
    def costs(self, batch: Instance) -> dict[str, float]:
        """Greedy over its k poly vectors, each instance's best route set as linc verifies it."""
        self.model.eval()
        td = self.env.reset(to_rl4co(batch))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = self.model.policy(
                td, self.env, phase="test", num_starts=ROLLOUTS, multisample=True,
                decode_type="greedy", return_actions=True,
            )  # fmt: skip
        actions = out["actions"].reshape(ROLLOUTS, batch.batch_size, -1).transpose(0, 1)
        costs = {}
        for i, name in enumerate(batch.names):
            best = math.inf
            for k in range(ROLLOUTS):
                checked = verify_instance(batch, i, actions_to_routes(actions[i, k]))
                if checked.feasible:
                    best = min(best, checked.cost)
            if math.isfinite(best):
                costs[name] = best
        return costs


def rl4co_curve(minutes: float, every_s: float, seed: int = 1) -> list[tuple[float, float]]:
    """``[(train_seconds, gap %)]``: rl4co's PolyNet validated every ``every_s`` seconds of
    training (the validation's own time not counted) and at the budget's end."""
    torch.manual_seed(seed)
    peer = Rl4coPolyNet(seed)
    validation, reference = validation_set()
    data = GeneratedData("cvrptw", N, BATCH, 1280, seed)
    curve, spent, step, next_check = [], 0.0, 0, 0.0
    while spent < minutes * 60:
        if spent >= next_check:
            costs = peer.costs(validation)
            curve.append((spent, gap_pct(costs, reference)))
            refused = len(validation.names) - len(costs)
            print(f"{spent:7.0f} s, step {step}: gap {curve[-1][1]:.2f}%, {refused} refused")
            next_check += every_s
        start = BUDGET_CLOCKS[CLOCK]()
        peer.step(data.batch(step // data.batches_per_epoch, step % data.batches_per_epoch))
        spent += BUDGET_CLOCKS[CLOCK]() - start
        step += 1
    curve.append((spent, gap_pct(peer.costs(validation), reference)))
    return curve


def linc_gap(preset: str, minutes: float, seed: int = 1) -> float:
    """linc's ``preset`` trained for ``minutes`` (``fit`` under ``budget_minutes``), validated
    as the peer is: greedy with K z-vectors (POMO: its starts), the best per instance."""
    from linc_core.model import LincPolicy
    from linc_core.runs.plan import DataSource, resolve_run, training_data
    from linc_core.train import fit

    train = {"num_rollouts": ROLLOUTS, "batch_size": BATCH, "instances_per_epoch": 1280}
    train |= {"budget_minutes": minutes, "budget_clock": CLOCK, "seed": seed}
    train["validation_size"] = 0
    plan = resolve_run(preset, DataSource("generated", "cvrptw", N), train=train)
    torch.manual_seed(seed)
    policy = LincPolicy(plan.model)
    fit(policy, plan.train, training_data(plan))
    validation, reference = validation_set()
    method = "multistart" if plan.model.z_dim == 0 else "greedy"
    config = DecodeConfig(method=method, num_z=ROLLOUTS, augment=1, seed=0)
    evaluation = evaluate_policy(policy.eval(), validation, config)
    costs = {r.instance: r.cost for r in evaluation.rows if r.feasible}
    return gap_pct(costs, reference)


def bench_quality(minutes: float = 5.0, quick: bool = False) -> list[dict]:
    """One row per model: the validation gap to PyVRP it reaches after ``minutes`` of training
    (quick: 0.5), rl4co's PolyNet as the peer of linc's PolyNet and Full LINC. (The main
    table's 60 minutes per model: ``python -m bench.bench_quality --minutes 60``.)"""
    minutes = 0.5 if quick else minutes
    peer = rl4co_curve(minutes, every_s=minutes * 60)[-1][1]
    rows = []
    for preset in ("polynet", "full_linc"):
        ours = linc_gap(preset, minutes)
        rows.append(
            {
                "name": f"val. gap to PyVRP (%) after {minutes:g} min, CVRPTW{N}: {preset} vs "
                "rl4co PolyNet",
                "ours": ours,
                "peer": peer,
                "peer_name": RL4CO_PEER,
                "ratio": ours / peer if peer else math.nan,
                "target": None,
                "lower_is_better": True,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_quality")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=120.0, help="seconds between validations")
    parser.add_argument("--out", type=Path, default=Path("bench/results/quality_rl4co.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    curve = rl4co_curve(args.minutes, args.every)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"label": f"rl4co PolyNet ({RL4CO_PEER})", "curve": curve}))
    last_seconds, last_gap = curve[-1]
    print(f"{len(curve)} validations; {last_gap:.2f}% at {last_seconds:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
