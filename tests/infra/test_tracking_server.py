"""The tracking server of infra/mlflow: TLS wherever it is served or reached (parsed files), and
the image's entrypoint run for real on 127.0.0.1: MLflow's basic auth with linc's landing page
(`--app-name linc-auth`, orchestration/tracking/ui_app.py) over HTTPS only, no permission for a
user by default (the shipped basic_auth.ini), a read-only root filesystem.
"""

from __future__ import annotations

import configparser
import datetime
import http.client
import ipaddress
import json
import os
import shlex
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest
import yaml

from faults.servers import LOOPBACK, free_port, process_tree, stop_group
from orchestration.tracking.ui_app import DEFAULT_WORKFLOW_SCRIPT
from tests.infra.test_hardening import (
    CLUSTER_YAML,
    MLFLOW,
    RAY_MANIFESTS,
    _mlflow_pod_template,
    _ray_groups,
)


def _mounted_from(pod: dict, container: dict, path: str) -> dict:
    """The volume ``container`` mounts read-only at the folder holding ``path``."""
    (mount,) = [
        m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mount.get("readOnly") is True, mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    return volume


def test_tls_everywhere_the_tracking_server_is_served_or_reached():
    shipped = configparser.ConfigParser()
    shipped.read(MLFLOW / "basic_auth.ini")
    assert shipped["mlflow"]["default_permission"] == "NO_PERMISSIONS"
    assert shipped.getboolean("mlflow", "grant_default_workspace_access") is False
    # The secrets come from the environment at start, never from this file.
    assert not {"database_uri", "admin_password"} & set(shipped["mlflow"])

    # Kubernetes: the certificate from a TLS Secret, HTTPS probes and Service port.
    template = _mlflow_pod_template()
    (server,) = template["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    for name in ("MLFLOW_TLS_CERT_FILE", "MLFLOW_TLS_KEY_FILE"):
        assert (
            _mounted_from(template["spec"], server, env[name])["secret"]["secretName"]
            == "linc-mlflow-tls"
        )
    assert server["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert server["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    # Compose: the certificate from a read-only folder, an HTTPS health check.
    compose = yaml.safe_load((MLFLOW / "docker-compose.yaml").read_text())["services"]["mlflow"]
    mounts = dict(v.rsplit(":", 1)[0].split(":") for v in compose["volumes"] if v.endswith(":ro"))
    for name in ("MLFLOW_TLS_CERT_FILE", "MLFLOW_TLS_KEY_FILE"):
        assert os.path.dirname(compose["environment"][name]) in mounts.values()
    assert "https://127.0.0.1:5000/health" in " ".join(compose["healthcheck"]["test"])

    # Every client verifies the server against a CA it is given.
    for name in RAY_MANIFESTS:
        for _, group in _ray_groups(name):
            pod = group["template"]["spec"]
            for container in pod["containers"]:
                env = {e["name"]: e.get("value") for e in container["env"]}
                assert env["MLFLOW_TRACKING_URI"].startswith("https://")
                volume = _mounted_from(pod, container, env["MLFLOW_TRACKING_SERVER_CERT_PATH"])
                assert volume["configMap"]["name"] == "linc-mlflow-ca"
    launcher = yaml.safe_load(CLUSTER_YAML.read_text())
    options = dict(
        o.split(" ", 1)[1].split("=", 1)
        for o in launcher["docker"]["run_options"]
        if o.startswith("--env ")
    )
    assert options["MLFLOW_TRACKING_URI"].startswith("https://")
    ca_file = Path(options["MLFLOW_TRACKING_SERVER_CERT_PATH"]).name
    assert any("linc/mlflow-ca-cert" in c and ca_file in c for c in launcher["setup_commands"])


def _self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: the server's and the clients' CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "linc-mlflow-test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "tls.crt", folder / "tls.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_file.chmod(0o600)
    return cert_file, key_file


ADMIN_PASSWORD = "linc-test-admin-9f3c1e7a"


def _request(url: str, context: ssl.SSLContext, user: tuple[str, str] | None = None, body=None):
    """(status, text) of a GET (or a JSON POST with ``body``), basic auth with ``user``."""
    headers = {"Content-Type": "application/json"}
    if user:
        headers["Authorization"] = "Basic " + b64encode(":".join(user).encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory):
    """infra/mlflow/entrypoint.sh as the image runs it (the shipped basic_auth.ini, TLS, two
    workers), on 127.0.0.1 with SQLite stores; as root (CI), in a mount namespace of its own whose
    root filesystem is read-only but for its temporary folder, as `readOnlyRootFilesystem` with
    an emptyDir at /tmp makes it. Yields (https URL, CA file, SSL context, server process)."""
    folder = tmp_path_factory.mktemp("tracking-server")
    cert_file, key_file = _self_signed_certificate(folder)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env |= {
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        "MLFLOW_BACKEND_STORE_URI": f"sqlite:///{folder / 'mlflow.db'}",
        "MLFLOW_AUTH_DATABASE_URI": f"sqlite:///{folder / 'auth.db'}",
        "MLFLOW_ARTIFACTS_DESTINATION": str(folder / "artifacts"),
        "MLFLOW_AUTH_ADMIN_USERNAME": "admin",
        "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "MLFLOW_FLASK_SERVER_SECRET_KEY": "linc-test-flask-key",
        "MLFLOW_TLS_CERT_FILE": str(cert_file),
        "MLFLOW_TLS_KEY_FILE": str(key_file),
        "LINC_MLFLOW_AUTH_INI": str(MLFLOW / "basic_auth.ini"),
        "MLFLOW_HOST": LOOPBACK,
        "MLFLOW_PORT": str(port),
        "MLFLOW_WORKERS": "2",
        "TMPDIR": str(folder),  # the Pod's /tmp
        "HOME": str(folder / "home"),  # read-only, like the image's home in the Pod
    }
    (folder / "home").mkdir()
    command = ["bash", str(MLFLOW / "entrypoint.sh")]
    if os.geteuid() == 0:
        writable, home = shlex.quote(str(folder)), shlex.quote(str(folder / "home"))
        mounts = (
            f"mount --bind {writable} {writable} && mount --bind {home} {home}"
            f" && mount -o remount,bind,ro {home} && mount -o remount,bind,ro /"
        )
        command = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"{mounts} && exec {shlex.join(command)}",
        ]
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(
        command,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"https://{LOOPBACK}:{port}"
    context = ssl.create_default_context(cafile=str(cert_file))
    try:
        deadline = time.monotonic() + 240
        while _request_or_none(f"{url}/health", context) != 200:
            assert server.poll() is None, (folder / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the tracking server did not answer in 240 s"
            time.sleep(0.5)
        yield url, cert_file, context, server
    finally:
        stop_group(server, grace=3)  # a client's kept-alive connection holds a graceful stop
        log.close()


def _request_or_none(url: str, context: ssl.SSLContext) -> int | None:
    try:
        return _request(url, context)[0]
    except OSError:
        return None


def test_tracking_server_asks_every_request_for_a_login_over_https_only(tracking_server):
    url, _, context, _ = tracking_server
    admin = ("admin", ADMIN_PASSWORD)
    # Anonymous and wrong passwords: 401 on the landing page and on the API alike.
    for user in (None, ("admin", "not-the-password")):
        for path in ("/", "/api/2.0/mlflow/experiments/search?max_results=1"):
            assert _request(f"{url}{path}", context, user)[0] == 401, (user, path)
    # The admin's landing page is linc's: the toggle script ahead of MLflow's own scripts.
    status, page = _request(f"{url}/", context, admin)
    assert status == 200
    assert page.index(DEFAULT_WORKFLOW_SCRIPT) <= page.index("<script")
    # No plain-HTTP listener: the port speaks TLS only.
    with pytest.raises((OSError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://{LOOPBACK}:{url.rsplit(':', 1)[1]}/health", timeout=10)
    # A client that does not trust the server's CA refuses it.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{url}/health", timeout=10, context=ssl.create_default_context())


def test_a_user_sees_only_what_was_granted(tracking_server, monkeypatch):
    """NO_PERMISSIONS in force: a user reads another's experiment only once granted READ; what a
    user creates (as linc's trials do, through MLflow's client and the CA file) is its own."""
    from mlflow.tracking import MlflowClient

    url, cert_file, context, _ = tracking_server
    admin = ("admin", ADMIN_PASSWORD)
    researcher = ("researcher", "linc-test-researcher-41d2")
    api = f"{url}/api/2.0/mlflow"
    created = _request(
        f"{api}/users/create",
        context,
        admin,
        {"username": researcher[0], "password": researcher[1]},
    )
    assert created[0] == 200, created
    experiment = json.loads(
        _request(f"{api}/experiments/create", context, admin, {"name": "linc-private"})[1]
    )
    experiment_id = experiment["experiment_id"]
    read = f"{api}/experiments/get?experiment_id={experiment_id}"
    assert _request(read, context, researcher)[0] == 403
    granted = _request(
        f"{url}/api/3.0/mlflow/users/permissions/grant",
        context,
        admin,
        {
            "username": researcher[0],
            "resource_type": "experiment",
            "resource_id": experiment_id,
            "permission": "READ",
        },
    )
    assert granted[0] == 200, granted
    assert _request(read, context, researcher)[0] == 200

    # MLflow's client over HTTPS as the trials use it (MLFLOW_TRACKING_* from the environment).
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", researcher[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", researcher[1])
    monkeypatch.setenv("MLFLOW_TRACKING_SERVER_CERT_PATH", str(cert_file))
    client = MlflowClient(tracking_uri=url)
    own = client.create_experiment("linc-researcher")
    run = client.create_run(own)
    client.log_metric(run.info.run_id, "eval_cost", 612.5)
    client.log_text(run.info.run_id, "linc", "notes.txt")  # proxied to the artifact store
    assert client.get_run(run.info.run_id).data.metrics == {"eval_cost": 612.5}
    assert [f.path for f in client.list_artifacts(run.info.run_id)] == ["notes.txt"]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    assert client.get_experiment(own).name == "linc-researcher"  # the admin sees everything


@pytest.mark.skipif(os.geteuid() != 0, reason="a read-only root needs a mount namespace (root)")
def test_tracking_server_serves_from_a_read_only_root(tracking_server):
    """Every process of the server (the CLI, uvicorn and its two workers) sees / read-only: the
    tests above, a run with an artifact included, passed that way."""
    *_, server = tracking_server
    processes = process_tree(server.pid)
    assert len(processes) >= 4
    for pid in processes:
        mounts = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
        (root,) = [m for m in mounts if m[4] == "/"]
        assert "ro" in root[5].split(","), (pid, root)


def test_entrypoint_refuses_to_start_without_its_certificate(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env |= {k: "set" for k in ("MLFLOW_BACKEND_STORE_URI", "MLFLOW_AUTH_DATABASE_URI")}
    env |= {k: "set" for k in ("MLFLOW_ARTIFACTS_DESTINATION", "MLFLOW_AUTH_ADMIN_USERNAME")}
    env |= {k: "set" for k in ("MLFLOW_AUTH_ADMIN_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY")}
    env["MLFLOW_TLS_CERT_FILE"] = str(tmp_path / "missing.crt")
    done = subprocess.run(
        ["bash", str(MLFLOW / "entrypoint.sh")], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"linc-mlflow-server: cannot read the TLS file {shlex.quote(str(tmp_path / 'missing.crt'))}"
        " (mount the certificate and key: infra/README.md, Hardening)"
    ]
