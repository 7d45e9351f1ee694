"""Data-parallel training: 2 gloo workers on a split batch give the single-process update.

(a) Without Ray: two processes (torch.multiprocessing, gloo, a FileStore, sockets on loopback)
each take one training step on their half of a fixed batch; gradients, parameters after the
Adam step and reported metrics equal one process's step on the whole batch.
(b) Through Ray Train on the shared local Ray: a 2-CPU-worker TorchTrainer trains two epochs,
its metrics and checkpoints come back to the caller, and they follow the single-process run; a
run resumed from a checkpoint file goes on from that epoch and follows it too.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from linc_core.decoding import DecodeConfig, decode
from linc_core.model import BatchRows, LincPolicy
from linc_core.runs.plan import DataSource, EvaluationSource, RunPlan, ValidationSource
from linc_core.train.checkpoint import load_checkpoint
from linc_core.train.data import GeneratedData, generate
from linc_core.train.distributed import SINGLE, World, batch_rows, world
from linc_core.train.loop import BaseCallback, fit, initial_policy
from linc_core.train.step import train_step
from tests.conftest import tiny_configs

BATCH, CUSTOMERS, ROLLOUTS = 4, 6, 4
LR = 0.1

# name: (preset, problem, training progress, TrainConfig overrides)
CASES: dict[str, tuple[str, str, float, dict]] = {
    # soft top-1 credit, whole-batch advantage normalisation, dense mask (progress < 0.25)
    "soft_top1_normalised": ("full_linc", "cvrptw", 0.1, {}),
    # the same with the best-only mask switched on
    "best_only_normalised": ("full_linc", "cvrptw", 0.5, {}),
    # POMO multi-start: starts instead of z, group mean, best-only, no normalisation
    "pomo_multi_start": ("pomo", "cvrptw", 0.5, {"rollout_mask": "best_only"}),
}


def tiny_run(preset: str, problem: str, **train):
    """The tiny model and a training config of BATCH instances x ROLLOUTS, no validation."""
    return tiny_configs(
        preset, problem, num_rollouts=ROLLOUTS, batch_size=BATCH, validation_size=0, **train
    )


def one_step(case: str, world_: World) -> dict:
    """One training step of ``case`` on the fixed batch: gradients, parameters, metrics."""
    preset, problem, progress, overrides = CASES[case]
    model, config = tiny_run(preset, problem, **overrides)
    torch.manual_seed(0)
    policy = LincPolicy(model)
    # SGD: the update is linear in the gradient, so equal gradients give equal parameters. Adam's
    # first step is lr * sign(g), which turns rounding noise on a gradient that is zero in exact
    # arithmetic (a softmax shift, say) into an lr-sized difference.
    optimizer = torch.optim.SGD(policy.parameters(), lr=LR)
    instance = generate(problem, BATCH, CUSTOMERS, seed=3)
    metrics = train_step(policy, optimizer, instance, config, progress, seed=18, world=world_)
    return {
        "grads": [p.grad.clone() if p.grad is not None else None for p in policy.parameters()],
        "params": [p.detach().clone() for p in policy.parameters()],
        "metrics": dataclasses.asdict(metrics),
    }


def fit_setup():
    model, config = tiny_run("full_linc", "cvrptw", instances_per_epoch=2 * BATCH, epochs=2)
    return model, config, GeneratedData("cvrptw", CUSTOMERS, BATCH, 2 * BATCH, seed=5)


def tiny_plan(**train) -> RunPlan:
    """fit_setup's run as a plan: data-parallel workers realise its data themselves."""
    model, config = tiny_run(
        "full_linc", "cvrptw", instances_per_epoch=2 * BATCH, epochs=2, **train
    )
    data = DataSource("generated", "cvrptw", CUSTOMERS, seed=5)
    return RunPlan("full_linc", None, model, config, data, ValidationSource(), EvaluationSource())


def interrupted_fit(folder: Path, world_: World) -> list[dict]:
    """fit() stopped after epoch 1 (2 steps), then resumed from its checkpoint: the history."""
    model, config, data = fit_setup()
    torch.manual_seed(world_.rank)  # different starting weights: fit must broadcast rank 0's
    fit(LincPolicy(model), config, data, checkpoint_dir=folder, max_steps=2, world=world_)
    dist.barrier()  # rank 0 writes the checkpoint after the last collective of the epoch
    resumed = fit(LincPolicy(model), config, data, resume_from=folder / "latest.pt", world=world_)
    return resumed.history


class RankClock:
    """A fake clock on which every training step takes ``seconds`` (fit reads it twice a step)."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.now, self.readings = seconds, 0.0, 0

    def __call__(self) -> float:
        self.readings += 1
        self.now += self.seconds if self.readings % 2 == 0 else 0.0
        return self.now


def budget_fit(world_: World) -> list[float]:
    """A one-minute budget on which rank 0's steps take 3 s and rank 1's 5 s: each step's tau."""
    model, config = tiny_run("full_linc", "cvrptw", instances_per_epoch=2 * BATCH, epochs=100)
    config = dataclasses.replace(config, budget_minutes=1.0)
    data = GeneratedData("cvrptw", CUSTOMERS, BATCH, 2 * BATCH, seed=5)
    taus: list[float] = []

    class Taus(BaseCallback):
        all_ranks = True

        def on_step(self, global_step, metrics) -> None:
            taus.append(metrics.tau)

    clock = RankClock(3.0 + 2.0 * world_.rank)
    fit(LincPolicy(model), config, data, callbacks=[Taus()], world=world_, clock=clock)
    return taus


def _worker(rank: int, size: int, store_path: str, out_dir: str) -> None:
    # Gloo opens its pair sockets on the interface named here: keep them on loopback.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, size)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
    try:
        here = world()
        assert (here.rank, here.size) == (rank, size)
        out = {case: one_step(case, here) for case in CASES}
        out["fit"] = interrupted_fit(Path(out_dir) / "fit", here)
        out["budget"] = budget_fit(here)
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_worker_steps(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("gloo")
    mp.spawn(_worker, args=(2, str(folder / "store"), str(folder)), nprocs=2, join=True)
    return [torch.load(folder / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("case", list(CASES))
def test_two_workers_give_the_single_process_step(case: str, two_worker_steps) -> None:
    single = one_step(case, SINGLE)
    grad_norm = torch.linalg.vector_norm(
        torch.stack([g.norm() for g in single["grads"] if g is not None])
    )
    assert grad_norm > 1e-3  # a step that moves nothing would make the comparison vacuous
    # float32 sums of cost-weighted terms (costs ~ 400) added in another order: rounding is
    # relative to the gradient's scale, not to each entry (some are 0 in exact arithmetic).
    atol = 1e-6 * max(float(g.abs().max()) for g in single["grads"] if g is not None)
    for rank, worker in enumerate(two_worker_steps):
        ours = worker[case]
        for ref, got in zip(single["grads"], ours["grads"], strict=True):
            assert (ref is None) == (got is None)
            if ref is not None:
                torch.testing.assert_close(got, ref, rtol=1e-5, atol=atol)
        for ref, got in zip(single["params"], ours["params"], strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-6, atol=LR * atol + 1e-7)
        for name, value in single["metrics"].items():
            assert ours["metrics"][name] == pytest.approx(value, rel=1e-6, abs=1e-9), (rank, name)
    # Both ranks end bit-identical: they applied the same all-reduced gradient.
    first, second = (worker[case]["params"] for worker in two_worker_steps)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    assert single["metrics"]["best_only"] == (case != "soft_top1_normalised")


def test_two_worker_fit_resumes_and_follows_single_process_fit(two_worker_steps, tmp_path):
    model, config, data = fit_setup()
    torch.manual_seed(0)
    single = fit(LincPolicy(model), config, data, checkpoint_dir=tmp_path)
    for worker in two_worker_steps:
        history = worker["fit"]
        assert [record["epoch"] for record in history] == [1, 2]
        for ours, ref in zip(history, single.history, strict=True):
            for key in ("train_best_cost", "train_mean_cost", "loss", "tau"):
                assert ours[key] == pytest.approx(ref[key], rel=1e-5), key


def test_ranks_agree_on_a_time_budget(two_worker_steps) -> None:
    """Each rank measures its own steps; the slower rank's seconds (5 s a step) set the
    progress of both: the same tau at every step, and both stop after 60 / 5 = 12 steps."""
    first, second = (worker["budget"] for worker in two_worker_steps)
    assert len(first) == len(second) == 12
    assert first == second and first[0] > first[-1]


def test_batch_rows_split_contiguously_and_reject_uneven_batches() -> None:
    assert batch_rows(8, World(rank=0, size=4)) == BatchRows(0, 2, 8)
    assert batch_rows(8, World(rank=3, size=4)) == BatchRows(6, 8, 8)
    with pytest.raises(ValueError, match="cannot be split evenly over 4"):
        batch_rows(6, World(rank=1, size=4))
    with pytest.raises(ValueError, match="invalid world"):
        World(rank=2, size=2)


def test_ray_train_two_workers_follow_fit_and_report_each_epoch(ray_session, tmp_path) -> None:
    from orchestration.trial.data_parallel import CHECKPOINT_FILE, fit_data_parallel

    plan = tiny_plan(learning_rate=1e-2)
    model, config = plan.model, plan.train
    data = GeneratedData("cvrptw", CUSTOMERS, BATCH, 2 * BATCH, seed=5)
    seen: list[tuple[dict, object]] = []
    common = {
        "num_workers": 2,
        "resources_per_worker": {"CPU": 1},
        "storage_path": tmp_path / "ray",
        "worker_env": {"GLOO_SOCKET_IFNAME": "lo"},
    }
    result = fit_data_parallel(
        plan, run_name="dp", on_epoch=lambda r, c: seen.append((r, c)), **common
    )
    assert [record["epoch"] for record, _ in seen] == [1, 2]
    assert [record["global_step"] for record in result.history] == [2, 4]
    assert all(checkpoint is not None for _, checkpoint in seen)
    final = load_checkpoint(result.checkpoint_path)
    assert (final["epoch"], final["global_step"]) == (2, 4)
    first = Path(seen[0][1].path) / CHECKPOINT_FILE
    assert load_checkpoint(first)["epoch"] == 1

    # The same run in one process: same metrics every epoch, same trained policy.
    initial = initial_policy(model, config)
    start = [p.detach().clone() for p in initial.parameters()]
    single = fit(initial, config, data)
    keys = ("train_best_cost", "train_mean_cost", "loss", "tau")
    for ours, ref in zip(result.history, single.history, strict=True):
        for key in keys:
            assert ours[key] == pytest.approx(ref[key], rel=1e-5), key
    trained = LincPolicy(model)
    trained.load_state_dict(final["model_state"])
    moved = max(
        float((p.detach() - s).abs().max())
        for p, s in zip(trained.parameters(), start, strict=True)
    )
    assert moved > config.learning_rate  # four Adam steps of lr 1e-2 moved the weights
    probe = generate("cvrptw", 8, CUSTOMERS, seed=99)
    greedy = DecodeConfig(method="greedy", num_z=ROLLOUTS, augment=1, seed=1)
    costs = [decode(p, probe, greedy).cost for p in (trained, single.policy)]
    torch.testing.assert_close(costs[0], costs[1], rtol=1e-5, atol=1e-4)


def test_ray_train_run_resumes_from_a_checkpoint_file(ray_session, tmp_path) -> None:
    """A single-process run stopped after epoch 1 goes on over 2 Ray Train workers from its
    checkpoint file: only epoch 2 runs and is reported, and it follows the uninterrupted
    single-process run. Its time (about 50 s on 2 busy CPUs) is Ray Train starting its
    controller and two workers; the model and data are already as small as they go."""
    from orchestration.trial.data_parallel import fit_data_parallel

    model, config, data = fit_setup()
    torch.manual_seed(config.seed)
    straight = fit(LincPolicy(model), config, data)
    torch.manual_seed(config.seed)
    fit(LincPolicy(model), config, data, checkpoint_dir=tmp_path / "one", max_steps=2)
    assert load_checkpoint(tmp_path / "one" / "latest.pt")["epoch"] == 1
    seen: list[int] = []
    resumed = fit_data_parallel(
        tiny_plan(),
        num_workers=2,
        resources_per_worker={"CPU": 1},
        storage_path=tmp_path / "ray",
        run_name="resumed",
        resume_from=tmp_path / "one" / "latest.pt",
        on_epoch=lambda record, _checkpoint: seen.append(record["epoch"]),
        worker_env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    assert seen == [2] and [record["epoch"] for record in resumed.history] == [2]
    for key in ("train_best_cost", "train_mean_cost", "loss", "tau"):
        assert resumed.history[0][key] == pytest.approx(straight.history[1][key], rel=1e-5), key
    final = load_checkpoint(resumed.checkpoint_path)
    assert (final["epoch"], final["global_step"]) == (2, 4)
    trained = LincPolicy(model)
    trained.load_state_dict(final["model_state"])
    probe = generate("cvrptw", 8, CUSTOMERS, seed=99)
    greedy = DecodeConfig(method="greedy", num_z=ROLLOUTS, augment=1, seed=1)
    costs = [decode(p, probe, greedy).cost for p in (trained, straight.policy)]
    torch.testing.assert_close(costs[0], costs[1], rtol=1e-5, atol=1e-4)


def _tune_trial(config: dict) -> None:
    from ray import tune

    from orchestration.trial.data_parallel import fit_data_parallel

    fit_data_parallel(
        tiny_plan(),
        num_workers=2,
        resources_per_worker={"CPU": 1},
        storage_path=config["storage"],
        run_name="inner",
        on_epoch=lambda record, checkpoint: tune.report(record, checkpoint=checkpoint),
        worker_env={"GLOO_SOCKET_IFNAME": "lo"},
    )


# Slow (Tune and Train start-up, about a minute): test_sweeps' data-parallel trial runs the same
# path through the platform in the default run.
@pytest.mark.slow
def test_data_parallel_run_inside_a_tune_trial_reports_each_epoch(ray_session, tmp_path) -> None:
    from ray import tune

    from orchestration.trial.data_parallel import CHECKPOINT_FILE

    # The trial itself holds no CPU (Tune rejects an all-zero request, hence the token memory):
    # the two Train workers need both CPUs of the local Ray.
    trainable = tune.with_resources(_tune_trial, {"cpu": 0, "memory": 1})
    tuner = tune.Tuner(
        trainable,
        param_space={"storage": str(tmp_path / "train")},
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="dp"),
    )
    result = tuner.fit()[0]
    assert result.error is None
    assert (result.metrics["epoch"], result.metrics["training_iteration"]) == (2, 2)
    model, config, data = fit_setup()
    single = fit(initial_policy(model, config), config, data)
    assert result.metrics["train_best_cost"] == pytest.approx(
        single.history[-1]["train_best_cost"], rel=1e-5
    )
    with result.checkpoint.as_directory() as folder:
        assert load_checkpoint(Path(folder) / CHECKPOINT_FILE)["epoch"] == 2
