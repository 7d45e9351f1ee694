"""GPU trials (``orchestration.trial.resources``): fractional GPUs pack several trials on one GPU,
a trial trains on the device Ray gives it, and one that cannot fails in one line.

The sweeps here start their own Ray with ``cluster.num_gpus=1`` (a loopback node that declares a
GPU it does not have): Ray schedules and isolates GPUs by declared resources, so packing is
tested for real on a CPU machine; training on the GPU itself is the GPU check's
(``python -m bench.gpu``, ``pytest -m gpu``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient

from linc_core.runs.memory import scorer_bytes, validation_bytes
from linc_core.utils.runtime import resident_bytes
from orchestration.trial.resources import (
    GIB,
    STEP_RISE_BYTES,
    TrialDeviceError,
    check_device,
    memory_bytes,
    placement,
    trial_heap_ceiling,
)
from sweeps.compose import load_platform_config
from tests.conftest import sweep_env

ROOT = Path(__file__).resolve().parents[3]


def gpu_smoke(storage: Path, *overrides: str) -> list[str]:
    return [
        "preset=smoke",
        f"cluster.storage={storage}",
        "cluster.num_gpus=1",
        "cluster.gpus_per_trial=0.5",
        *overrides,
    ]


def run_ablation(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.ablation", *args],
        cwd=ROOT, env=sweep_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_trial_with_gpus_trains_on_cuda_in_the_precision_cuda_resolves_to(tmp_path) -> None:
    config = load_platform_config(gpu_smoke(tmp_path))
    assert config.run.train.device == "cuda"
    assert config.run.train.precision == "fp32"  # auto, resolved once: what the run logs
    bundle = placement(config.raw).bundles[0]
    assert bundle["GPU"] == 0.5 and bundle["CPU"] == 1.0
    on_cpu = load_platform_config(gpu_smoke(tmp_path, "train.device=cpu"))
    assert (on_cpu.run.train.device, on_cpu.run.train.precision) == ("cpu", "fp32")
    plain = load_platform_config(["preset=smoke", f"cluster.storage={tmp_path}"])
    assert (plain.run.train.device, plain.run.train.precision) == ("cpu", "fp32")


def test_a_cuda_trial_without_cuda_is_refused_in_one_line(tmp_path) -> None:
    config = load_platform_config(gpu_smoke(tmp_path))
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal cannot happen here")
    with pytest.raises(TrialDeviceError) as refused:
        check_device(config.cluster, config.run, [0])
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "train.device=cuda (cluster.gpus_per_trial=0.5): this trial's process sees no CUDA "
        "device (Ray gave it GPU [0]; torch "
    )
    cpu = load_platform_config(gpu_smoke(tmp_path, "train.device=cpu"))
    check_device(cpu.cluster, cpu.run, [0])  # a CPU run may hold a GPU reservation


def test_half_a_gpu_per_trial_runs_two_variants_on_one_gpu_at_once(tmp_path) -> None:
    """Two trials of 0.5 GPU on a node of one GPU run side by side, each given GPU 0 (with 1.0
    GPU per trial they could only run one after the other)."""
    # long enough that both trials run a while even when a worker takes seconds to start
    done = run_ablation(gpu_smoke(tmp_path, "train.device=cpu", "train.epochs=80"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")
    runs = client.search_runs([experiment.experiment_id])
    trials = [r for r in runs if "variant" in r.data.tags]
    assert sorted(r.data.tags["variant"] for r in trials) == ["baseline", "full_linc"]
    assert [r.data.tags["gpu_ids"] for r in trials] == ["0", "0"]
    first, second = sorted(trials, key=lambda r: r.info.start_time)
    assert second.info.start_time < first.info.end_time  # they overlapped


def test_a_sweep_that_reserves_gpus_on_a_node_without_cuda_fails_naming_the_setting(
    tmp_path,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    done = run_ablation(gpu_smoke(tmp_path, "cluster.max_failures=0"))
    assert done.returncode == 1
    output = done.stdout + done.stderr
    failed = [line for line in output.splitlines() if ": FAILED" in line]
    assert len(failed) == 2, output[-3000:]
    for line in failed:
        assert (
            "train.device=cuda (cluster.gpus_per_trial=0.5): this trial's process sees no " in line
        )
    assert "Traceback" not in done.stdout


@pytest.mark.parametrize("preset", ["main-cpu", "main-cpu-cvrp", "main-cpu-tsp"])
def test_two_main_table_trials_fit_this_machine_at_once(preset: str) -> None:
    """The main-table presets run two trials at a time on a 2-core, 24 GiB machine, where Ray
    offers about 17 GiB of ``memory``: each variant's reservation is at most 6 GiB (the
    evaluation's z=800 x8 decoding is reserved as one chunk, not all 358,400 rollouts: 10 GiB
    before, so the trials ran one at a time)."""
    for variant in ("full_linc", "polynet", "pomo"):
        config = load_platform_config([f"preset={preset}", f"model.variant={variant}"])
        reserved = memory_bytes(config.cluster, config.run)
        assert 2 * GIB < reserved <= 6 * GIB, (variant, reserved / GIB)


def test_a_cpu_trial_holds_its_heap_under_its_reservation_less_a_step_and_its_validation() -> None:
    """The ceiling a CPU trial trims its heap above: what it reserved less STEP_RISE_BYTES, the
    validation decoding's estimate and an MLP scorer's; never below what the process holds;
    none for a trial that reserves nothing or trains on a GPU."""
    config = load_platform_config(["preset=cpu-repro", "train.validation_size=32"])
    run = config.run
    assert validation_bytes(run) > 0
    reserved = resident_bytes() + 4 * GIB
    ceiling = trial_heap_ceiling(reserved, run)
    assert ceiling is not None and ceiling.trims == 0
    assert ceiling.ceiling_bytes == reserved - STEP_RISE_BYTES - validation_bytes(run)
    before = resident_bytes()
    floor = trial_heap_ceiling(1 << 20, run)  # a reservation below what the process holds
    assert floor is not None and before <= floor.ceiling_bytes <= resident_bytes()
    assert trial_heap_ceiling(0, run) is None  # cluster.memory_per_trial_gb=0: none reserved
    assert scorer_bytes(run) == 0  # full_linc's scorer is linear
    naive_mlp = load_platform_config(["preset=cpu-repro", "model.variant=naive_mlp"]).run
    mlp = 1.5 * 4 * 14.0 * 56 * 128 * 51 * 128  # MLP_ROWS x B K (n+1) H floats, by hand
    assert scorer_bytes(naive_mlp) == int(mlp)
    mlp_ceiling = trial_heap_ceiling(reserved + 4 * GIB, naive_mlp)
    assert mlp_ceiling is not None
    assert mlp_ceiling.ceiling_bytes == reserved + 4 * GIB - STEP_RISE_BYTES - int(mlp)
    on_gpu = load_platform_config(["preset=cpu-repro", "train.device=cuda"]).run
    assert trial_heap_ceiling(reserved, on_gpu) is None
