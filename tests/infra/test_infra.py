"""infra/: the configs parse and pass the checks of the tools that read them, and the pins of the
image equal pyproject's.

The cluster launcher config goes through Ray's own `prepare_config` + `validate_config` (what
`ray up` runs before it talks to AWS), and the KubeRay RayCluster through Ray's own translation of
a RayCluster into an autoscaling config (what the autoscaler sidecar runs). A real local cluster
autoscaling 0 -> 1 -> 0 worker for a job: tests/infra/test_autoscaling.py.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
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
    # The sweep-state key on the head alone, where a sweep's driver runs: no worker reads it.
    assert "linc/sweep-state-key" in " ".join(config["head_setup_commands"])
    assert "LINC_STATE_KEY" not in " ".join(config["worker_setup_commands"])

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

    pins = _pyproject()["project"]
    project = _requirements(pins["dependencies"] + pins["optional-dependencies"]["postgres"])
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


def test_only_the_head_where_the_driver_runs_gets_the_sweep_state_key():
    """The key sealing Tune's state is read by the sweep's driver alone (it runs on the head: a
    job's entry point and the Tune callbacks that seal): a worker Pod, which runs trials whose
    code is anyone's, has no copy of it (issue: every worker Pod had it)."""
    for cluster in (
        _manifest(RAYCLUSTER_YAML, "RayCluster")["spec"],
        _manifest(RAYJOB_YAML, "RayJob")["spec"]["rayClusterSpec"],
    ):
        (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
        head_env = {e["name"]: e for e in head["env"]}
        assert "secretKeyRef" in head_env["LINC_STATE_KEY"]["valueFrom"]
        for group in cluster["workerGroupSpecs"]:
            for container in group["template"]["spec"]["containers"]:
                worker_env = {e["name"]: e for e in container["env"]}
                assert "LINC_STATE_KEY" not in worker_env, group["groupName"]
                assert "LINC_STATE_KEY" not in str(container), group["groupName"]
                # all else the head has, the trials need too
                assert worker_env == {k: v for k, v in head_env.items() if k != "LINC_STATE_KEY"}
