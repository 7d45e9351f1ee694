"""What every fault scenario needs: a sweep driver in its own process, waits, and the audit.

A scenario starts the real entry point (``python -m sweeps.train`` or ``sweeps.ablation``) in a
new process group, injects its fault (a signal, a stopped server, a truncated file), lets the
sweep finish or re-runs it, and then reads the tracking store: :func:`audit` counts each trial
run's epoch metrics against the steps it should have (lost, duplicated) and the runs still
RUNNING. A :class:`Row` is one line of the matrix.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from faults.servers import process_tree, stop_group
from linc_core.metrics import (
    EPOCH,
    EVAL_COST,
    LOSS,
    SECONDS,
    TAU,
    TRAIN_BEST_COST,
    TRAIN_MEAN_COST,
)

ROOT = Path(__file__).resolve().parents[1]
AUDITED_METRICS = (EPOCH, SECONDS, TRAIN_BEST_COST, TRAIN_MEAN_COST, LOSS, TAU)
# The smoke preset at a size whose epochs take about a second on 2 shared cores: long enough to
# put a fault in the middle of training, short enough for a matrix of a dozen sweeps.
SWEEP = (
    "preset=smoke",
    "task.num_customers=10",
    "train.instances_per_epoch=32",
    "train.batch_size=8",
    "train.validation_size=8",
    "cluster.num_cpus=2",
    "cluster.reuse_actors=false",
    "tracking.experiment=faults",
)


@dataclass
class Row:
    """One line of the matrix."""

    fault: str
    outcome: str = "not run"
    metrics_lost: int | None = None
    duplicated_steps: int | None = None
    runs_running: int | None = None
    seconds: float = 0.0
    ok: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class Audit:
    trials: int
    finished: int
    metrics_lost: int
    duplicated_steps: int
    runs_running: int

    @property
    def clean(self) -> bool:
        return self.metrics_lost == 0 and self.duplicated_steps == 0 and self.runs_running == 0


class Driver:
    """A sweep entry point in its own process group (its local Ray in a session of its own:
    :meth:`kill` ends every process the driver started)."""

    def __init__(
        self,
        folder: Path,
        module: str,
        overrides: Sequence[str],
        env: dict[str, str] | None = None,
        drop_file_override: bool = False,
    ):
        self.log_path = folder / f"{module.rsplit('.', 1)[-1]}-{int(time.time() * 1000)}.log"
        command = [sys.executable, "-m", module, *overrides]
        environment = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
        if "RAY_ADDRESS" not in (env or {}):
            environment.pop("RAY_ADDRESS", None)  # a local Ray of its own
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_without_file_override if drop_file_override else None,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        finally:
            self._log.flush()

    def signal(self, signum: int, *, group: bool = False) -> None:
        """``signum`` to the driver, or (``group``) to its whole process group, as ``timeout``,
        ``kill -- -PGID`` or a process manager's stop sends it."""
        if group:
            os.killpg(self.process.pid, signum)  # its own session: the group is its pid
        else:
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """SIGKILL the driver and everything it started, and wait until all of it is gone: its
        process group, and every descendant outside it (a trial process Ray started in a
        session of its own would otherwise write one more checkpoint after the kill)."""
        tree = process_tree(self.process.pid)
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        for pid in tree - {self.process.pid}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(Path(f"/proc/{pid}").exists() for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            stop_group(self.process, grace=5)

    def output(self, tail: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-tail:]

    def descendants(self, marker: str) -> list[int]:
        """Processes of this driver's tree whose command line contains ``marker``."""
        found = []
        for pid in sorted(process_tree(self.process.pid) - {self.process.pid}):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in command:
                found.append(pid)
        return found


def _without_file_override() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set, so that even root obeys file permissions (a read-only folder stays one)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP


def wait_for(
    condition: Callable[[], object],
    timeout: float,
    what: str,
    driver: Driver | None = None,
    poll: float = 0.5,
):
    """Poll ``condition`` until it returns a true value (returned) or ``timeout`` passes; with
    ``driver``, stop waiting as soon as it has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if driver is not None and driver.process.poll() is not None:
            tail = driver.output(300).strip().splitlines()[-1:]
            raise RuntimeError(
                f"the driver exited {driver.process.returncode} before {what}: {tail}"
            )
        time.sleep(poll)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


def checkpoints(storage: Path, sweep: str) -> list[Path]:
    """Tune's checkpoint folders of every trial of a local sweep (Tune keeps the last two of
    each trial), oldest first."""
    found = []
    for path in (storage / sweep).glob("*/checkpoint_*"):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:  # deleted by Tune meanwhile
            continue
    return [path for _, path in sorted(found)]


def intact_by_step(storage: Path, sweep: str) -> list[Path]:
    """The checkpoint folders of a local sweep with a manifest, by training position (what a
    restarted trial chooses from), oldest first."""
    found = []
    for path in checkpoints(storage, sweep):
        try:
            manifest = json.loads((path / "latest.pt.json").read_text())
        except (OSError, ValueError):
            continue
        found.append((int(manifest["global_step"]), path))
    return [path for _, path in sorted(found)]


def tune_recorded(storage: Path, sweep: str) -> list[Path]:
    """The checkpoint folders Tune's newest experiment-state snapshot keeps for each trial."""
    import ray.cloudpickle

    snapshots = sorted((storage / sweep).glob("experiment_state-*.json"))
    if not snapshots:
        return []
    found = []
    for _, runtime in json.loads(snapshots[-1].read_text())["trial_data"]:
        runtime = json.loads(runtime) if isinstance(runtime, str) else runtime
        manager = ray.cloudpickle.loads(bytes.fromhex(runtime["checkpoint_manager"]["value"]))
        found += [Path(r.checkpoint.path) for r in manager._checkpoint_results]
    return found


def reported(storage: Path, sweep: str) -> int:
    """The highest checkpoint number any trial of a local sweep reached (0: none yet)."""
    numbers = [int(p.name.rsplit("_", 1)[1]) for p in (storage / sweep).glob("*/checkpoint_*")]
    return max(numbers, default=0)


def audit(tracking_uri: str, experiment: str, sweep: str, epochs: int) -> Audit:
    """Count each trial run's epoch metrics against steps 1..epochs, and the RUNNING runs."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return Audit(0, 0, 0, 0, 0)
    runs = client.search_runs([found.experiment_id], max_results=1000)
    trials = [r for r in runs if r.data.tags.get("sweep") == sweep and "variant" in r.data.tags]
    lost = duplicated = finished = 0
    for run in trials:
        finished += run.info.status == "FINISHED" and EVAL_COST in run.data.metrics
        for key in AUDITED_METRICS:
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            lost += len(set(range(1, epochs + 1)) - set(steps))
            duplicated += len(steps) - len(set(steps))
    running = sum(r.info.status == "RUNNING" for r in runs)
    return Audit(len(trials), finished, lost, duplicated, running)


def first_traceback(log: str) -> str:
    """Where a console's first traceback came from, for a row's note (empty for none): the line
    before it and the error's line (the traceback's last, before the next unindented line)."""
    # a Ray worker's lines come prefixed with "(name pid=N) "
    lines = [re.sub(r"^\([^)]*pid=\d+[^)]*\) ", "", line) for line in log.splitlines()]
    starts = [i for i, line in enumerate(lines) if "Traceback" in line]
    if not starts:
        return ""
    first = starts[0]
    before = lines[first - 1].strip() if first > 0 else ""
    error = ""
    for line in lines[first + 1 :]:
        error = line.strip()
        if line and not line.startswith((" ", "\t")) and "Traceback" not in line:
            break
    return f" (the first after {before[-200:]!r}: {error[:300]!r})"


def one_line_error(output: str) -> str | None:
    """The output's only line, when the command printed exactly one (a one-line error)."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else None


__all__ = [
    "AUDITED_METRICS",
    "Audit",
    "Driver",
    "Row",
    "SWEEP",
    "audit",
    "checkpoints",
    "intact_by_step",
    "one_line_error",
    "reported",
    "tune_recorded",
    "wait_for",
]
