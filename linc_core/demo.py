"""The foundation demo: a Solomon instance solved by PyVRP and by a random feasible policy.

Both solutions are checked by the independent verifier and printed with their costs under the
benchmark's convention (DIMACS one-decimal distances for Solomon) and exact distances. The
platform issue replaces this with the full ablation job; this keeps `make demo` meaningful.

    python -m linc_core.demo [--instance C101] [--seconds 5] [--rollouts 128] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch

from linc_core.benchmarks import data_dir, load_bks
from linc_core.instances import read_solomon
from linc_core.problems import CVRPTWEnv, actions_to_routes, random_feasible_actions, rollout
from linc_core.reference import solve_reference
from linc_core.runtime import tune_cpu_allocator
from linc_core.verify import verify_instance


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="linc-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--instance", default="C101", help="Solomon instance name")
    parser.add_argument("--seconds", type=float, default=5.0, help="PyVRP time budget")
    parser.add_argument("--rollouts", type=int, default=128, help="random rollouts (best kept)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    tune_cpu_allocator()

    path = data_dir() / "solomon100" / f"{args.instance}.txt"
    instance = read_solomon(path)
    bks = load_bks("solomon100").get(args.instance)
    print(f"instance {args.instance}: {instance.num_customers} customers, BKS {bks} (DIMACS)")

    reference = solve_reference(instance, seconds=args.seconds, seed=args.seed, convention="dimacs")
    exact = verify_instance(instance, 0, reference.routes, convention="exact")
    print(
        f"PyVRP ({args.seconds:g} s): {reference.num_routes} routes, "
        f"cost {reference.cost:.1f} (dimacs, feasible={reference.feasible}), "
        f"{exact.cost:.2f} (exact, feasible={exact.feasible})"
    )

    start = time.perf_counter()
    env = CVRPTWEnv(instance, num_rollouts=args.rollouts)
    generator = torch.Generator().manual_seed(args.seed)
    final, actions = rollout(env, lambda s: random_feasible_actions(s.mask, generator))
    best = int(final.cost[0].argmin())
    routes = actions_to_routes(actions[0, best])
    seconds = time.perf_counter() - start
    checks = {c: verify_instance(instance, 0, routes, convention=c) for c in ("dimacs", "exact")}
    print(
        f"random feasible policy (best of {args.rollouts}, {seconds:.2f} s): {len(routes)} routes, "
        f"cost {checks['dimacs'].cost:.1f} (dimacs), {checks['exact'].cost:.2f} (exact; env "
        f"{final.cost[0, best].item():.2f}), feasible={checks['exact'].feasible}"
    )
    ok = reference.feasible and checks["exact"].feasible
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
