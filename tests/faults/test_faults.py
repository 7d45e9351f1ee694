"""The cheap rows of the fault matrix (``python -m faults`` runs them all; see faults/).

Real components only: the real entry point in its own process, a folder made read-only for the
driver (root's override of permissions dropped), a port nothing listens on, real checkpoints cut
in half, SQLite stores copied as a moved sweep would be, and a SIGTERM to a real trial process.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pytest
import torch
from mlflow.tracking import MlflowClient

from faults import scenarios
from linc_core.model import LincPolicy
from linc_core.presets import preset_configs
from linc_core.runs.memory import estimate_run_memory, parameter_count
from linc_core.train import GeneratedData, fit
from orchestration.experiment.folder import SweepFolder
from orchestration.tracking.runs import SweepRuns
from orchestration.trial.checkpoints import persist, restore_newest_intact
from orchestration.trial.plan import TrialPlan
from orchestration.trial.resources import MEMORY_STEP, placement
from sweeps.compose import load_platform_config

SMOKE = ["preset=smoke", "tracking.experiment=faults"]


def test_storage_not_writable_is_refused_in_one_line_before_anything_runs(tmp_path):
    row = scenarios.storage_not_writable(tmp_path)
    assert row.ok, (row.outcome, row.notes)
    assert "linc-tune: cluster.storage: cannot write to" in row.outcome
    assert row.outcome.endswith("(Permission denied)")


def test_unreachable_tracking_store_is_refused_in_one_line_before_anything_runs(tmp_path):
    row = scenarios.tracking_unreachable(tmp_path)
    assert row.ok, (row.outcome, row.notes)
    assert row.outcome.endswith("does not answer (Connection refused)")


# The fault matrix's row 'SIGTERM to a trial' runs this scenario at every landing (``make
# faults``, in CI after the tests); here it adds its finer checks to ``make test-all``.
@pytest.mark.slow
def test_sigterm_to_a_trial_checkpoints_its_step_and_the_retry_finishes_it(tmp_path):
    row = scenarios.trial_sigterm(tmp_path, epochs=60)
    assert row.ok, (row.outcome, row.notes)
    assert (row.metrics_lost, row.duplicated_steps, row.runs_running) == (0, 0, 0)
    # row.ok includes the resume point: the preemption checkpoint, or the Tune checkpoint the
    # dying trial stored during a report the driver never received (the SIGTERM's timing
    # decides), or, when Ray's worker crashed on the signal first, the last epoch's checkpoint
    ray_crashed = "Ray's worker crashed on the signal" in row.notes[0]
    assert ray_crashed or "checkpointed on SIGTERM: True" in row.notes[0]
    assert "preempted_" in row.notes[0] or "checkpoint_" in row.notes[0]


def trial_checkpoints(tmp_path: Path, epochs: int) -> tuple[SweepFolder, list[str]]:
    """A trial folder holding one Tune-style checkpoint folder per epoch of a tiny run."""
    model, config = preset_configs(
        "full_linc", "cvrptw", num_rollouts=4, batch_size=2, instances_per_epoch=2, epochs=epochs
    )
    model = dataclasses.replace(
        model, embedding_dim=16, encoder_layers=1, num_heads=2, ff_hidden_dim=32
    )
    storage = SweepFolder(pafs.LocalFileSystem(), str(tmp_path / "trial"))
    names = []
    for epoch in range(1, epochs + 1):
        torch.manual_seed(0)
        work = tmp_path / f"work-{epoch}"
        single = dataclasses.replace(config, epochs=epoch)
        fit(
            LincPolicy(model), single, GeneratedData("cvrptw", 5, 2, 2, seed=1), checkpoint_dir=work
        )
        names.append(f"checkpoint_{epoch:06d}")
        persist(storage, work, names[-1])
    return storage, names


def test_a_truncated_newest_checkpoint_falls_back_to_the_intact_one(tmp_path, caplog):
    storage, names = trial_checkpoints(tmp_path, epochs=2)
    newest = Path(storage.path) / names[-1] / "latest.pt"
    size = newest.stat().st_size
    with newest.open("r+b") as handle:
        handle.truncate(size // 2)
    caplog.set_level(logging.WARNING, logger="orchestration.trial.checkpoints")
    restored = restore_newest_intact(storage, tmp_path / "restore")
    assert restored.source == f"{storage.path}/{names[0]}" and restored.global_step == 1
    warning = f"checkpoint {newest}: truncated ({size // 2} of {size} bytes)"
    assert any(warning in r.message for r in caplog.records)
    # none intact: the trial starts again from scratch, with a warning (no retry spent on it)
    older = Path(storage.path) / names[0] / "latest.pt"
    older.write_bytes(older.read_bytes()[:100])
    assert restore_newest_intact(storage, tmp_path / "again").folder is None
    assert "starts again from scratch" in caplog.records[-1].message


def test_a_checkpoint_folder_without_its_manifest_is_named_and_skipped(tmp_path, caplog):
    """The manifest is written last: a folder without one is an interrupted write."""
    storage, names = trial_checkpoints(tmp_path, epochs=2)
    manifest = Path(storage.path) / names[-1] / "latest.pt.json"
    manifest.unlink()
    caplog.set_level(logging.WARNING, logger="orchestration.trial.checkpoints")
    restored = restore_newest_intact(storage, tmp_path / "restore")
    assert restored.source == f"{storage.path}/{names[0]}" and restored.global_step == 1
    warning = f"{storage.path}/{names[-1]}: no readable manifest (an interrupted write)"
    assert [r.message for r in caplog.records if warning in r.message], caplog.text


def parent_runs(uri: str) -> dict[str, str]:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("faults")
    runs = client.search_runs([experiment.experiment_id])
    return {r.info.run_id: r.info.status for r in runs if r.data.tags.get("kind") == "sweep"}


def test_a_rerun_reopens_its_parent_only_in_its_own_store_and_folder(tmp_path):
    """Same store and folder: the same run. The folder moved with its SQLite store: the same
    run, in the moved store. A copy pointed at the original's store, or a new store: a new run,
    and the recorded one is not touched."""
    sweep = {"name": "sweep", "kind": "ablation"}

    def parent(storage: Path, *extra: str):
        config = load_platform_config([*SMOKE, f"cluster.storage={storage}", *extra])
        plan = TrialPlan.from_config(config)
        folder = SweepFolder(pafs.LocalFileSystem(), str(storage / "sweep"))
        runs = SweepRuns.open(
            plan.tracking, sweep, plan.params(sweep=sweep), folder.path, folder.record()
        )
        folder.write_record(runs.record)  # as the sweep does
        return plan, runs

    plan, first_runs = parent(tmp_path / "runs")
    first_id = first_runs.parent.run_id
    first_runs.settle([], status="FINISHED", timeout_s=30)
    _, again_runs = parent(tmp_path / "runs")
    again = again_runs.parent
    assert again.run_id == first_id
    assert again.close(30)  # before the folder moves

    shutil.move(tmp_path / "runs", tmp_path / "moved")
    moved_plan, moved_runs = parent(tmp_path / "moved")
    moved = moved_runs.parent
    assert moved.run_id == first_id and moved_plan.tracking.uri != plan.tracking.uri
    assert moved.close(30)

    shutil.copytree(tmp_path / "moved" / "sweep", tmp_path / "copy" / "sweep")
    shared = f"tracking.uri={moved_plan.tracking.uri}"
    _, copy_runs = parent(tmp_path / "copy", shared)
    copy = copy_runs.parent
    assert copy.run_id != first_id
    assert copy.close(30)
    # re-opened by `moved`, but RUNNING again only once Tune restores the sweep (Sweep.run_trials)
    assert parent_runs(moved_plan.tracking.uri)[first_id] == "FINISHED"


def test_finishing_a_stopped_sweep_leaves_no_run_running(tmp_path):
    config = load_platform_config([*SMOKE, f"cluster.storage={tmp_path}"])
    plan = TrialPlan.from_config(config)
    sweep = {"name": "s"}
    runs = SweepRuns.open(plan.tracking, sweep, plan.params(sweep=sweep), str(tmp_path / "s"), None)
    parent = runs.parent
    client = MlflowClient(tracking_uri=plan.tracking.uri)
    experiment = client.get_experiment_by_name("faults").experiment_id
    tags = {"mlflow.parentRunId": parent.run_id, "variant": "full_linc"}
    trial = client.create_run(experiment, tags=tags)  # a trial whose process was lost
    runs.settle([], status="KILLED", timeout_s=30)
    assert client.get_run(trial.info.run_id).info.status == "KILLED"
    assert client.get_run(parent.run_id).info.status == "KILLED"


def test_each_trial_reserves_the_memory_its_variant_needs() -> None:
    config = load_platform_config(["preset=cpu-repro"])
    small = estimate_run_memory(config.run)
    mlp = load_platform_config(["preset=cpu-repro", "model.variant=naive_mlp"])
    assert estimate_run_memory(mlp.run) > 1.5 * small  # its candidate MLP over every rollout
    bundle = placement(config.raw).bundles[0]
    assert bundle["memory"] % MEMORY_STEP == 0 and small <= bundle["memory"] < small + MEMORY_STEP
    fixed = placement(config.with_values(**{"cluster.memory_per_trial_gb": 2})).bundles[0]
    assert (fixed["CPU"], fixed["memory"]) == (1, 2 << 30)


def test_the_parameter_count_is_the_policys_and_leaves_the_random_stream_alone() -> None:
    plan = load_platform_config(["preset=cpu-repro"]).run
    torch.manual_seed(7)
    expected_next = torch.rand(3)
    torch.manual_seed(7)
    count = parameter_count(plan)
    assert torch.equal(torch.rand(3), expected_next)  # the driver's global stream is untouched
    assert count == sum(p.numel() for p in LincPolicy(plan.model).parameters())


@pytest.mark.parametrize("value", [-1, -0.5])
def test_bad_fault_and_cluster_settings_are_config_errors(value) -> None:
    from linc_core.utils.typed import ConfigError

    with pytest.raises(ConfigError, match="memory_per_trial_gb"):
        load_platform_config([*SMOKE, f"cluster.memory_per_trial_gb={value}"])


@pytest.mark.parametrize(
    "override", ["cluster.stall_timeout_s=0", "fault.stall_at_epoch=0", "fault.fail_at_epoch=-1"]
)
def test_bad_stall_and_fault_epochs_are_config_errors(override: str) -> None:
    from linc_core.utils.typed import ConfigError

    with pytest.raises(ConfigError, match=override.split("=")[0].split(".")[1]):
        load_platform_config([*SMOKE, override])


def test_zero_memory_reserves_none_for_node_types_that_declare_none() -> None:
    config = load_platform_config([*SMOKE, "cluster.memory_per_trial_gb=0"])
    assert "memory" not in placement(config.raw).bundles[0]


def test_a_rows_note_names_where_the_first_traceback_came_from() -> None:
    """A row that saw a traceback says which (the storage-full row's one in CI was found so)."""
    from faults.harness import first_traceback

    worker = "\n".join(
        [
            "WARNING a line before",
            "(ImplicitFunc pid=7) Traceback (most recent call last):",
            '(ImplicitFunc pid=7)   File "x.py", line 1, in f',
            "(ImplicitFunc pid=7)     g()",
            "(ImplicitFunc pid=7) OSError: [Errno 28] No space left on device",
            "the next line",
        ]
    )
    said = first_traceback(worker)
    error = "OSError: [Errno 28] No space left on device"
    assert said == f" (the first after 'WARNING a line before': {error!r})"
    driver = "a\nTraceback (most recent call last):\n  File y\n_pickle.UnpicklingError: cut\n"
    assert first_traceback(driver).endswith(": '_pickle.UnpicklingError: cut')")
    assert first_traceback("no traceback here\n") == ""
