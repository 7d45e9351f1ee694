"""infra/: a real local cluster autoscales 0 -> 1 -> 0 worker for a job.

The autoscaling scenario runs a real Ray head on 127.0.0.1 in subprocesses (own temp dir, ports,
token; never `ray.init` in this process, so the session-wide `ray_session` fixture is untouched),
with the fake multi-node provider shipped in Ray, whose "nodes" are extra raylets on this machine.
The static checks of infra/'s configs: tests/infra/test_infra.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from mlflow.tracking import MlflowClient

# ------------------------------------------------------------------------------------------------
# local autoscaling cluster (fake multi-node provider)

FAKE_HEAD_NODE_ID = "f" * 51 + "00000"  # the id the fake provider gives the head
WORKER_TYPE = "cpu_worker"
# Offered only by the worker type: a job asking for it cannot run until a worker is added.
WORKER_RESOURCES = {"CPU": 2, "linc_worker": 2}

# Autoscaler v2 (the default of `ray up` since Ray 2.50) logs each instance's life cycle.
SCALING_LOG = re.compile(
    r"Adding \d+ node|Launching \d+ nodes|Launched \d+ nodes|Removing \d+ nodes|"
    r"RAY_RUNNING->RAY_STOP_REQUESTED|TERMINATING->TERMINATED|Terminating node"
)


def smoke_ablation_job(storage: Path) -> Callable[[Path], list[str]]:
    """The linc smoke ablation as the submitted job; every trial needs the worker-only resource
    (the head has no CPU either), so nothing runs until the autoscaler adds a worker."""

    def command(workdir: Path) -> list[str]:
        return [
            sys.executable, "-m", "sweeps.ablation", "preset=smoke",
            f"cluster.storage={storage}",
            "cluster.custom_resources={linc_worker: 1}",
            # Ray's fake node provider cannot give a node type a memory resource (launchers infer
            # it from the instance type, KubeRay from the pod's limits): reserve none here
            "cluster.memory_per_trial_gb=0",
        ]  # fmt: skip

    return command


@dataclass
class FakeCluster:
    workdir: Path
    gcs_address: str
    dashboard_url: str
    env: dict[str, str]  # for clients: token auth, loopback, no inherited Ray variables

    @property
    def monitor_log(self) -> Path:
        return self.workdir / "ray" / "session_latest" / "logs" / "monitor.log"

    def scaling_lines(self) -> list[str]:
        if not self.monitor_log.exists():
            return []
        lines = self.monitor_log.read_text(errors="replace").splitlines()
        return [line for line in lines if SCALING_LOG.search(line)]

    def ray(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(Path(sys.executable).parent / "ray"), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fake_cluster_config(gcs_address: str, idle_timeout_minutes: float) -> dict:
    """A cluster config for Ray's fake multi-node provider, complete as `ray up` would leave it."""
    return {
        "cluster_name": "linc-local",
        "max_workers": 1,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": idle_timeout_minutes,
        "provider": {
            # The registered type `fake_multinode` reads an example.yaml that the Ray wheel does
            # not ship; the same provider class loaded as an external module needs no defaults.
            "type": "external",
            "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
            "gcs_address": gcs_address,
            "head_node_id": FAKE_HEAD_NODE_ID,
            "launch_multiple": True,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
        },
        "auth": {},
        "docker": {},
        "head_node_type": "ray.head.default",
        "available_node_types": {
            "ray.head.default": {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
            WORKER_TYPE: {
                "resources": WORKER_RESOURCES,
                "node_config": {},
                "min_workers": 0,
                "max_workers": 1,
            },
        },
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }


def _cluster_processes(marker: str, pgid: int | None) -> list[int]:
    """Pids of this cluster: its process group, or the marker in their environment or command
    line (job drivers and actors run in sessions of their own). Never another cluster's."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            if pgid is not None and os.getpgid(pid) == pgid:
                found.append(pid)
                continue
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except (OSError, ProcessLookupError):
            continue
        if marker.encode() in blob:
            found.append(pid)
    return found


def _terminate(marker: str, pgid: int | None, grace: float = 2.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _cluster_processes(marker, pgid):
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _cluster_processes(marker, pgid):
            time.sleep(0.2)


@contextmanager
def fake_autoscaling_cluster(idle_timeout_minutes: float = 0.05) -> Iterator[FakeCluster]:
    """A Ray head on 127.0.0.1 with zero workers and the v2 autoscaler over the fake provider.

    Its own temp dir (short: Ray's socket paths must stay under 107 bytes), ports and auth token;
    every process is stopped on exit, found by process group, marker or temp dir.
    """
    workdir = Path(tempfile.mkdtemp(prefix="linc-as-", dir="/tmp"))
    marker = str(workdir)
    token = workdir / "auth_token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    gcs_port, dashboard_port, client_port = _free_port(), _free_port(), _free_port()
    gcs_address = f"127.0.0.1:{gcs_port}"
    config = workdir / "autoscaling.json"
    config.write_text(json.dumps(_fake_cluster_config(gcs_address, idle_timeout_minutes)))

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env |= {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every socket on 127.0.0.1
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),  # not the user's ~/.ray/auth_token
        "RAY_USAGE_STATS_ENABLED": "0",
        "OMP_NUM_THREADS": "1",
        "LINC_INFRA_TEST_CLUSTER": marker,
    }
    head_env = env | {
        "RAY_FAKE_CLUSTER": "1",
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "RAY_enable_autoscaler_v2": "1",
        "RAY_CLOUD_INSTANCE_ID": FAKE_HEAD_NODE_ID,
        "RAY_OVERRIDE_NODE_ID_FOR_TESTING": FAKE_HEAD_NODE_ID,
    }
    ray_bin = str(Path(sys.executable).parent / "ray")
    start = [
        ray_bin, "start", "--head",
        "--node-ip-address=127.0.0.1", f"--port={gcs_port}", "--num-cpus=0",
        f"--autoscaling-config={config}", f"--temp-dir={workdir / 'ray'}",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
        f"--ray-client-server-port={client_port}", "--dashboard-agent-listen-port=0",
        "--disable-usage-stats",
    ]  # fmt: skip
    pgid = None
    try:
        head = subprocess.Popen(
            start,
            env=head_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its daemons stay in this process group
        )
        pgid = head.pid
        out, _ = head.communicate(timeout=90)
        assert head.returncode == 0, out[-3000:]
        yield FakeCluster(workdir, gcs_address, f"http://127.0.0.1:{dashboard_port}", env)
    finally:
        _terminate(marker, pgid)
        shutil.rmtree(workdir, ignore_errors=True)


def run_autoscaling_scenario(job: Callable[[Path], list[str]], job_timeout: float = 300) -> dict:
    """Start the cluster, submit `job(workdir)` with `ray job submit`, wait for the idle worker to
    go; return what was seen. Bounded everywhere; the cluster is always torn down."""
    seen: dict = {}
    with fake_autoscaling_cluster() as cluster:
        seen["marker"] = str(cluster.workdir)
        seen["log_before_job"] = cluster.scaling_lines()
        submit = cluster.ray(
            "job", "submit", f"--address={cluster.dashboard_url}",
            "--submission-id=linc-infra-smoke", "--", *job(cluster.workdir),
            timeout=job_timeout,
        )  # fmt: skip
        seen["submit_returncode"] = submit.returncode
        seen["submit_output"] = submit.stdout + submit.stderr
        # The worker is idle once the job is done: wait for the autoscaler to terminate it.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any("TERMINATING->TERMINATED" in line for line in cluster.scaling_lines()):
                break
            time.sleep(1)
        seen["scaling_log"] = cluster.scaling_lines()
        # The cluster's own view (GCS) after the removal.
        seen["status_after"] = cluster.ray(
            "status", f"--address={cluster.gcs_address}", timeout=60
        ).stdout
    seen["leftover_processes"] = _cluster_processes(seen["marker"], None)
    return seen


def test_local_cluster_adds_a_worker_for_the_job_and_removes_it_when_idle(tmp_path):
    storage = tmp_path / "runs"
    seen = run_autoscaling_scenario(smoke_ablation_job(storage))
    log = seen["scaling_log"]
    print("\n".join(["autoscaler (monitor.log):", *log]))

    # Zero workers until the job asked for one (the head has no CPU to run anything).
    assert seen["log_before_job"] == []

    # `ray job submit` of the smoke ablation succeeded and printed its table ...
    assert seen["submit_returncode"] == 0, seen["submit_output"][-3000:]
    assert "succeeded" in seen["submit_output"]
    assert "| Full LINC |" in seen["submit_output"] and "| Baseline |" in seen["submit_output"]
    # ... and its trials ran on the added worker, each an MLflow run nested under the sweep.
    client = MlflowClient(tracking_uri=f"sqlite:///{storage / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("linc-smoke")
    runs = client.search_runs([experiment.experiment_id])
    trials = [r for r in runs if "variant" in r.data.tags]
    assert sorted(r.data.tags["variant"] for r in trials) == ["baseline", "full_linc"]
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 3
    worker_nodes = {r.data.tags["ray_node"] for r in trials}
    assert len(worker_nodes) == 1 and FAKE_HEAD_NODE_ID not in worker_nodes

    # The autoscaler added one worker of the worker type, then removed it as idle.
    added = [x for x in log if re.search(rf"Adding 1 node\(s\) of type {WORKER_TYPE}", x)]
    removed = [x for x in log if re.search(rf"Removing 1 nodes of type {WORKER_TYPE} \(idle\)", x)]
    assert len(added) == 1 and len(removed) == 1, log
    assert log.index(added[0]) < log.index(removed[0])
    assert any("TERMINATING->TERMINATED" in x for x in log), log

    # Ray's own status agrees: only the head is left; the worker is listed as terminated.
    status = seen["status_after"]
    nodes = status.split("Active:", 1)[1].split("Recent failures:", 1)[0]
    assert nodes.count("node_") == 1 and FAKE_HEAD_NODE_ID in nodes, status
    assert f"{WORKER_TYPE}: NodeTerminated" in status, status

    # Teardown left nothing of this cluster running.
    assert seen["leftover_processes"] == []
