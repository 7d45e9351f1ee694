"""infra/'s hardening of Pods and images, checked on the parsed files: every Ray and MLflow Pod
runs unprivileged with a read-only root, both images end as a fixed non-root user, and the
NetworkPolicies let each Pod be reached only by what needs it (an evaluator of Kubernetes'
NetworkPolicy rules over the shipped manifests). The EC2 security groups:
tests/infra/test_aws.py; the tracking server's TLS and login: tests/infra/test_tracking_server.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
CLUSTER_YAML = INFRA / "aws" / "cluster.yaml"
SECURITY_GROUPS = INFRA / "aws" / "security-groups.yaml"
RAY_MANIFESTS = {"linc": INFRA / "kuberay" / "raycluster.yaml"}
RAY_MANIFESTS["linc-ablation"] = INFRA / "kuberay" / "rayjob.yaml"
NAMESPACE_YAML = INFRA / "kuberay" / "namespace.yaml"
MLFLOW = INFRA / "mlflow"
IMAGE_UID = 1000  # the user of both images, as in Ray's own images


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _cluster_spec(name: str) -> dict:
    (doc,) = [d for d in _documents(RAY_MANIFESTS[name]) if d["kind"] in ("RayCluster", "RayJob")]
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def _ray_groups(name: str) -> list[tuple[str, dict]]:
    """(node type, group) of the cluster ``name``: head first."""
    spec = _cluster_spec(name)
    return [("head", spec["headGroupSpec"])] + [("worker", g) for g in spec["workerGroupSpecs"]]


def _mlflow_pod_template() -> dict:
    (deployment,) = [
        d for d in _documents(MLFLOW / "k8s" / "mlflow.yaml") if d["kind"] == "Deployment"
    ]
    return deployment["spec"]["template"]


def _pod_specs() -> list[tuple[str, dict]]:
    specs = [
        (f"{n}/{g.get('groupName', 'head')}", g["template"]["spec"])
        for n in RAY_MANIFESTS
        for _, g in _ray_groups(n)
    ]
    return [*specs, ("mlflow", _mlflow_pod_template()["spec"])]


# ------------------------------------------------------------------------------------------------
# Pods and images


def _assert_unprivileged(where: str, pod: dict, container: dict) -> None:
    def field(name: str):
        return container.get("securityContext", {}).get(
            name, pod.get("securityContext", {}).get(name)
        )

    context = container.get("securityContext", {})
    assert field("runAsNonRoot") is True, where
    assert field("runAsUser") == IMAGE_UID, where
    assert (field("seccompProfile") or {}).get("type") == "RuntimeDefault", where
    assert context.get("allowPrivilegeEscalation") is False, where
    assert "ALL" in context.get("capabilities", {}).get("drop", []), where
    assert not context.get("capabilities", {}).get("add") and not context.get("privileged"), where
    assert context.get("readOnlyRootFilesystem") is True, where
    # ... so whatever the container writes has an emptyDir: /tmp at least.
    empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    assert mounts.get("/tmp") in empty_dirs, where


def test_every_ray_and_mlflow_pod_runs_unprivileged_with_a_read_only_root():
    for where, pod in _pod_specs():
        assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
        for container in pod["containers"]:
            _assert_unprivileged(f"{where}/{container['name']}", pod, container)
    # The autoscaler sidecar KubeRay adds to each head Pod gets the same restrictions.
    for name in RAY_MANIFESTS:
        options = _cluster_spec(name)["autoscalerOptions"]
        head = _cluster_spec(name)["headGroupSpec"]["template"]["spec"]
        sidecar = {
            "name": "autoscaler",
            **{k: options[k] for k in ("securityContext", "volumeMounts")},
        }
        _assert_unprivileged(f"{name}/autoscaler", head, sidecar)

    # EC2 (Docker, no Kubernetes): no capability, no privilege gained.
    run_options = yaml.safe_load(CLUSTER_YAML.read_text())["docker"]["run_options"]
    assert "--cap-drop=ALL" in run_options and "--security-opt=no-new-privileges" in run_options
    # Compose: the tracking server read-only and unprivileged; PostgreSQL on an internal network
    # that only the tracking server shares, with no published port.
    compose = yaml.safe_load((MLFLOW / "docker-compose.yaml").read_text())
    server, database = compose["services"]["mlflow"], compose["services"]["postgres"]
    assert server["user"] == f"{IMAGE_UID}:{IMAGE_UID}" and server["read_only"] is True
    assert server["cap_drop"] == ["ALL"] and "no-new-privileges:true" in server["security_opt"]
    assert "/tmp" in server["tmpfs"]
    assert database["networks"] == ["database"] and "ports" not in database
    assert compose["networks"]["database"]["internal"] is True
    assert [n for n, s in compose["services"].items() if "database" in s.get("networks", [])] == [
        "postgres",
        "mlflow",
    ]


def _dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: continuation lines joined, comments dropped."""
    instructions, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


@pytest.mark.parametrize("dockerfile", [INFRA / "docker" / "Dockerfile", MLFLOW / "Dockerfile"])
def test_each_image_ends_as_a_fixed_non_root_user(dockerfile):
    instructions = _dockerfile_instructions(dockerfile)
    keywords = [k for k, _ in instructions]
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    assert last_user > len(keywords) - 1 - keywords[::-1].index("FROM")
    # Nothing after it but what describes how the container starts.
    assert set(keywords[last_user + 1 :]) <= {"CMD", "ENTRYPOINT", "EXPOSE"}
    user = instructions[last_user][1]
    assert re.fullmatch(r"\d+:\d+", user) and user == f"{IMAGE_UID}:{IMAGE_UID}", user
    # The uid exists in the image (a home for the user, its name in ps and logs).
    runs = " ".join(a for k, a in instructions if k == "RUN")
    assert re.search(rf"useradd [^&]*--uid {IMAGE_UID}\b", runs)


# ------------------------------------------------------------------------------------------------
# NetworkPolicies

NAMESPACES = ("linc", "kuberay-system", "elsewhere")


def _selects(selector: dict, labels: dict) -> bool:
    """Kubernetes' label selector semantics (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = (
            expression["key"],
            expression["operator"],
            expression.get("values", []),
        )
        present = key in labels
        if {
            "In": present and labels.get(key) in values,
            "NotIn": not (present and labels[key] in values),
            "Exists": present,
            "DoesNotExist": not present,
        }[operator] is False:
            return False
    return True


def _admitted(peer: dict, source: tuple[str, dict], policy_namespace: str) -> bool:
    namespace, labels = source
    assert "ipBlock" not in peer  # the shipped policies name Pods only
    if "namespaceSelector" in peer:
        ns_ok = _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
    else:
        ns_ok = namespace == policy_namespace
    return ns_ok and _selects(peer.get("podSelector", {}), labels)


def _allowed(
    policies: list[dict], source: tuple[str, dict], target: tuple[str, dict], port: int
) -> bool:
    """Whether Kubernetes lets ``source`` (namespace, labels) reach ``target``'s TCP ``port``."""
    applying = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target[0]
        and "Ingress" in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], target[1])
    ]
    if not applying:
        return True  # a Pod no policy selects is open
    for policy in applying:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            assert all(isinstance(p["port"], int) for p in ports or [])  # no named ports
            if ports is not None and not any(
                p["port"] == port and p["protocol"] == "TCP" for p in ports
            ):
                continue
            peers = rule.get("from")
            if peers is None or any(_admitted(peer, source, target[0]) for peer in peers):
                return True
    return False


def _ray_pods(name: str, node_type: str) -> list[tuple[str, dict]]:
    """The Pods KubeRay makes for the cluster ``name``: template labels plus KubeRay's own."""
    cluster = name if name == "linc" else f"{name}-x7k2p"  # a RayJob's cluster: a random suffix
    kuberay = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/is-ray-node": "yes",
    }
    return [
        (
            "linc",
            {
                **g["template"]["metadata"]["labels"],
                **kuberay,
                "ray.io/group": g.get("groupName", "headgroup"),
            },
        )
        for kind, g in _ray_groups(name)
        if kind == node_type
    ]


def test_network_policies_let_each_pod_be_reached_only_by_what_needs_it():
    policies = [
        d
        for path in [NAMESPACE_YAML, *RAY_MANIFESTS.values(), MLFLOW / "k8s" / "mlflow.yaml"]
        for d in _documents(path)
        if d["kind"] == "NetworkPolicy"
    ]
    assert all(p["apiVersion"] == "networking.k8s.io/v1" for p in policies)
    mlflow = ("linc", _mlflow_pod_template()["metadata"]["labels"])
    heads = {n: _ray_pods(n, "head")[0] for n in RAY_MANIFESTS}
    workers = {n: _ray_pods(n, "worker") for n in RAY_MANIFESTS}
    stranger = ("linc", {"app": "notebook"})
    client = ("linc", {"linc.io/ray-client": "true"})
    operator = ("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"})
    submitter = (
        "linc",
        {"job-name": "linc-ablation", "batch.kubernetes.io/job-name": "linc-ablation"},
    )

    # Default deny: a Pod of the namespace that no other policy opens accepts nothing.
    assert not _allowed(policies, mlflow, ("linc", {"app": "anything"}), 5000)
    for pod in [mlflow, *heads.values(), *(w for ws in workers.values() for w in ws)]:
        assert not _allowed(policies, stranger, pod, 5000) and not _allowed(
            policies, stranger, pod, 6379
        )
        assert not _allowed(policies, ("elsewhere", stranger[1]), pod, 8265)

    for name, head in heads.items():
        other = next(n for n in RAY_MANIFESTS if n != name)
        for worker in workers[name]:
            # Every Ray port (fixed or picked at start) between the Pods of one cluster ...
            for port in (6379, 8265, 10001, 52365, 8076, 12345, 19999, 44217):
                assert _allowed(policies, worker, head, port) and _allowed(
                    policies, head, worker, port
                )
            assert all(_allowed(policies, w, worker, 12345) for w in workers[name])
            # ... and none from another cluster, the tracking server, or the clients.
            for source in (heads[other], *workers[other], mlflow, client, operator):
                assert not _allowed(policies, source, worker, 12345), (name, source)
            # Ray Pods reach the tracking server's port, nothing else of it.
            assert _allowed(policies, worker, mlflow, 5000) and not _allowed(
                policies, worker, mlflow, 5001
            )
        assert _allowed(policies, head, mlflow, 5000)
        for source in (heads[other], *workers[other], mlflow):
            assert not any(_allowed(policies, source, head, p) for p in (6379, 8265, 10001, 12345))
        # The job API and the client port for those who submit; the GCS for nobody else.
        assert _allowed(policies, client, head, 8265) and _allowed(policies, client, head, 10001)
        assert _allowed(policies, operator, head, 8265) and not _allowed(
            policies, operator, head, 10001
        )
        for source in (client, operator, submitter):
            assert not _allowed(policies, source, head, 6379)
        assert _allowed(policies, submitter, head, 8265) is (name == "linc-ablation")
    assert not _allowed(policies, client, mlflow, 5000) and not _allowed(
        policies, operator, mlflow, 5000
    )
    assert _allowed(policies, ("linc", {"linc.io/mlflow-client": "true"}), mlflow, 5000)
