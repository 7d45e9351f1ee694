"""infra/: the configs parse and pass the checks of the tools that read them, the pins of the image
equal pyproject's, and a real local cluster autoscales 0 -> 1 -> 0 worker for a job.

The cluster launcher config goes through Ray's own `prepare_config` + `validate_config` (what
`ray up` runs before it talks to AWS), and the KubeRay RayCluster through Ray's own translation of
a RayCluster into an autoscaling config (what the autoscaler sidecar runs).

The autoscaling scenario runs a real Ray head on 127.0.0.1 in subprocesses (own temp dir, ports,
token; never `ray.init` in this process, so the session-wide `ray_session` fixture is untouched),
with the fake multi-node provider shipped in Ray, whose "nodes" are extra raylets on this machine.
"""

from __future__ import annotations

import copy
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
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parents[1]
INFRA = REPO / "infra"
CLUSTER_YAML = INFRA / "aws" / "cluster.yaml"
RAYCLUSTER_YAML = INFRA / "kuberay" / "raycluster.yaml"
RAYJOB_YAML = INFRA / "kuberay" / "rayjob.yaml"
DOCKERFILE = INFRA / "docker" / "Dockerfile"
MLFLOW_DOCKERFILE = INFRA / "mlflow" / "Dockerfile"
MLFLOW_COMPOSE = INFRA / "mlflow" / "docker-compose.yaml"
MLFLOW_K8S = INFRA / "mlflow" / "k8s" / "mlflow.yaml"

SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY", re.IGNORECASE)


# ------------------------------------------------------------------------------------------------
# helpers


def _pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _requirements(lines: list[str]) -> dict[str, tuple[frozenset[str], str]]:
    """name -> (extras, specifier) of requirement strings; a name listed twice must agree."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    out: dict[str, tuple[frozenset[str], str]] = {}
    for line in lines:
        req = Requirement(line)
        key = canonicalize_name(req.name)
        value = (frozenset(req.extras), str(req.specifier))
        assert out.setdefault(key, value) == value, f"{req.name} pinned twice, differently"
    return out


def _pinned(name: str) -> str:
    """The exact version pyproject pins for `name`."""
    (_, spec) = _requirements(_pyproject()["project"]["dependencies"])[name]
    assert spec.startswith("=="), spec
    return spec[2:]


def _dockerfile_requirements(path: Path) -> list[str]:
    """Quoted `name==version` strings of the Dockerfile's instructions (comments ignored)."""
    code = "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    return re.findall(r"\"([A-Za-z0-9_.\-]+(?:\[[A-Za-z0-9_,\-]+\])?==[^\"\s]+)\"", code)


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _manifest(path: Path, kind: str) -> dict:
    """The one document of ``kind`` in a multi-document manifest (a cluster and its policies)."""
    (found,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == kind]
    return found


def _with_cluster_label(spec: dict, value: str) -> dict:
    """A RayCluster spec whose Pods' ``linc.io/ray-cluster`` label (what its NetworkPolicies
    select) is ``value``: the RayJob's cluster and the RayCluster differ in that label only."""
    spec = copy.deepcopy(spec)
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group["template"]["metadata"]["labels"]["linc.io/ray-cluster"] = value
    return spec


def _containers(cluster_spec: dict) -> list[dict]:
    groups = [cluster_spec["headGroupSpec"], *cluster_spec["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def _image() -> str:
    """The one image every node runs: ghcr.io/ORG/linc:<project version>."""
    return _load(CLUSTER_YAML)["docker"]["image"]


# ------------------------------------------------------------------------------------------------
# static checks


def test_every_yaml_under_infra_parses_into_mappings():
    files = sorted(p for p in INFRA.rglob("*") if p.suffix in {".yaml", ".yml"})
    expected = {CLUSTER_YAML, RAYCLUSTER_YAML, RAYJOB_YAML, MLFLOW_COMPOSE, MLFLOW_K8S}
    expected.add(INFRA / "aws" / "security-groups.yaml")
    assert expected <= set(files)
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs, path
        assert all(isinstance(d, dict) for d in docs), path


def test_cluster_launcher_config_passes_rays_own_validation():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load(CLUSTER_YAML)
    config = prepare_config(copy.deepcopy(raw))  # merges the AWS defaults, as `ray up` does
    validate_config(config)  # ray-schema.json shipped in Ray, plus Ray's cross-field checks

    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    assert head["resources"] == {"CPU": 0} and head["max_workers"] == 0
    workers = {name: t for name, t in types.items() if name != config["head_node_type"]}
    assert all(t["min_workers"] == 0 and t["max_workers"] >= 1 for t in workers.values())
    gpus = sorted(t["resources"].get("GPU", 0) for t in workers.values())
    assert gpus == [0, 1, 8]
    assert workers["cpu_worker"]["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"
    assert workers["gpu_1x"]["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot"
    assert all("IamInstanceProfile" in t["node_config"] for t in types.values())
    assert 0 < config["idle_timeout_minutes"] <= 10
    run_options = " ".join(config["docker"]["run_options"])
    assert "MLFLOW_TRACKING_URI=https://" in run_options and "RAY_AUTH_MODE=token" in run_options
    # The secrets come from Secrets Manager at start, sourced for every launcher command.
    setup = " ".join(config["head_setup_commands"] + config["worker_setup_commands"])
    assert "secretsmanager" in setup and "~/.bashrc" in setup

    # The validation has teeth: a misspelt field and an inconsistent worker count are rejected.
    import jsonschema

    typo = copy.deepcopy(raw)
    typo["available_node_types"]["gpu_1x"]["max_worker"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(typo))
    too_many = copy.deepcopy(raw)
    too_many["available_node_types"]["gpu_8x"]["min_workers"] = too_many["max_workers"] + 1
    with pytest.raises(ValueError, match="max_workers"):
        validate_config(prepare_config(too_many))


def test_kuberay_manifests_carry_what_kuberay_and_the_autoscaler_read():
    from ray.autoscaler._private.kuberay.autoscaling_config import (
        _derive_autoscaling_config_from_ray_cr,
    )

    raycluster = _manifest(RAYCLUSTER_YAML, "RayCluster")
    rayjob = _manifest(RAYJOB_YAML, "RayJob")
    assert (raycluster["apiVersion"], raycluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    assert "sweeps.ablation" in rayjob["spec"]["entrypoint"].split()
    assert rayjob["spec"]["shutdownAfterJobFinishes"] is True
    # The RayJob's cluster is the RayCluster's spec (but for the label its policies select), so
    # the checks below cover both.
    assert rayjob["spec"]["rayClusterSpec"] == _with_cluster_label(
        raycluster["spec"], "linc-ablation"
    )

    spec = raycluster["spec"]
    assert spec["rayVersion"] == _pinned("ray")
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] == 0 and group["replicas"] == 0 and group["maxReplicas"] >= 1
        assert {"groupName", "rayStartParams", "template"} <= set(group)

    # What the autoscaler sidecar derives from this RayCluster (and validates on the way).
    autoscaling = _derive_autoscaling_config_from_ray_cr(raycluster)
    types = autoscaling["available_node_types"]
    assert types["headgroup"]["resources"]["CPU"] == 0
    assert sorted(t["resources"].get("GPU", 0) for n, t in types.items() if n != "headgroup") == [
        0,
        1,
        8,
    ]
    assert all(t["min_workers"] == 0 for t in types.values())
    assert (
        autoscaling["idle_timeout_minutes"] == spec["autoscalerOptions"]["idleTimeoutSeconds"] / 60
    )

    # One image everywhere, tagged with the project version.
    image = _image()
    assert image.rsplit(":", 1)[1] == _pyproject()["project"]["version"]
    assert {c["image"] for c in _containers(spec)} == {image}
    assert image in DOCKERFILE.read_text() and image in (INFRA / "README.md").read_text()
    # Trials find the tracking server through the environment; its password through a Secret.
    for container in _containers(spec):
        env = {e["name"]: e for e in container["env"]}
        assert env["MLFLOW_TRACKING_URI"]["value"].startswith("https://mlflow.")
        assert "secretKeyRef" in env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]


def test_image_pins_equal_pyproject():
    from packaging.utils import canonicalize_name

    project = _requirements(_pyproject()["project"]["dependencies"])
    image = _requirements(_dockerfile_requirements(DOCKERFILE))
    assert image == project
    assert re.search(r"^FROM python:3\.11[-.\w]*$", DOCKERFILE.read_text(), re.MULTILINE)

    # The tracking server image uses the same mlflow and boto3 versions.
    server = _requirements(_dockerfile_requirements(MLFLOW_DOCKERFILE))
    for name in ("mlflow", "boto3"):
        assert server[canonicalize_name(name)][1] == project[name][1]
    assert "auth" in server["mlflow"][0]  # basic-auth needs the [auth] extra (Flask-WTF)


def test_no_secret_is_written_in_infra():
    text = "\n".join(p.read_text() for p in INFRA.rglob("*") if p.is_file())
    assert not re.search(r"AKIA[0-9A-Z]{16}", text)  # AWS access key ids
    assert "AWS_SECRET_ACCESS_KEY" not in text and "AWS_ACCESS_KEY_ID" not in text
    assert "PRIVATE KEY-----" not in text  # TLS keys are mounted, never committed

    compose = _load(MLFLOW_COMPOSE)
    for service in compose["services"].values():
        for key, value in service.get("environment", {}).items():
            if SECRET_NAME.search(key) or "postgresql://" in str(value):
                assert "${" in str(value), f"{key} must come from the environment"

    manifests = [
        *yaml.safe_load_all(MLFLOW_K8S.read_text()),
        *yaml.safe_load_all(RAYCLUSTER_YAML.read_text()),
        *yaml.safe_load_all(RAYJOB_YAML.read_text()),
    ]
    assert all(m["kind"] != "Secret" for m in manifests)
    containers = [
        *_containers(_manifest(RAYCLUSTER_YAML, "RayCluster")["spec"]),
        *_containers(_manifest(RAYJOB_YAML, "RayJob")["spec"]["rayClusterSpec"]),
        *_manifest(MLFLOW_K8S, "Deployment")["spec"]["template"]["spec"]["containers"],
    ]
    for container in containers:
        for entry in container.get("env", []):
            if SECRET_NAME.search(entry["name"]) or entry["name"].endswith("STORE_URI"):
                assert "secretKeyRef" in entry["valueFrom"], entry["name"]


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
