"""Secrets never leave the process (issue 34): a sweep and a search whose stores need secrets,
then a grep of everything they wrote and printed.

A throw-away PostgreSQL requires a password (scram-sha-256 over TCP) of a user ``linc``: a long
random token. ``linc-tune`` (the smoke preset, one epoch) logs to it directly
(``tracking.uri=postgresql://linc:TOKEN@...``) with its Tune storage on a moto S3 server, AWS
keys in its environment; ``linc-hpo`` (two trials) keeps its Optuna study in it
(``search.storage=postgresql://linc:TOKEN@...``) and logs to an ``mlflow server`` backed by it
through ``tracking.uri=http://linc:TOKEN@...``. Both must work (runs finished, the trials'
metrics in the stores, the study's trials), and the token and the AWS secret must appear
nowhere: not in a dump of each database, the S3 objects, the storage folders, the artifacts,
Ray's session logs, nor the console. The refusals (a store that does not answer, a storage URI
with a credential) say so in one line, the secret masked.
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from faults.postgres import PostgresServer, _postgres_command
from faults.servers import LOOPBACK, MlflowServer, S3Server, free_port
from tests.conftest import sweep_env

TOKEN = secrets.token_urlsafe(24)
AWS_KEY_ID = "AKIA" + secrets.token_hex(8).upper()
AWS_SECRET = secrets.token_urlsafe(30)
DATABASES = ("mlflow", "mlflowserver", "optuna")


def forms(secret: str) -> set[bytes]:
    """The ways a secret can be written down: as it is, and the basic-auth header of linc's."""
    return {secret.encode(), base64.b64encode(f"linc:{secret}".encode())}


SECRET_FORMS = forms(TOKEN) | forms(AWS_SECRET)


@pytest.fixture(scope="module")
def guarded_postgres():
    """PostgreSQL whose TCP connections need the password of user ``linc`` (owner of
    ``DATABASES``); the superuser keeps the socket. Yields the server."""
    import psycopg2

    server = PostgresServer()
    try:
        server.start()
    except RuntimeError as err:
        server.stop()
        pytest.fail(str(err), pytrace=False)
    admin = psycopg2.connect(host=LOOPBACK, port=server.port, user="postgres", dbname="linc")
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("CREATE ROLE linc LOGIN PASSWORD %s", (TOKEN,))
        for database in DATABASES:
            cursor.execute(f"CREATE DATABASE {database} OWNER linc")
        rules = server.data / "pg_hba.conf"
        lines = rules.read_text().splitlines()
        guarded = [
            ln.replace("trust", "scram-sha-256") if ln.startswith("host") else ln for ln in lines
        ]
        rules.write_text("\n".join(guarded) + "\n")
        cursor.execute("SELECT pg_reload_conf()")
    admin.close()
    with pytest.raises(psycopg2.OperationalError, match="password"):  # it does need it now
        psycopg2.connect(host=LOOPBACK, port=server.port, user="linc", dbname="mlflow").close()
    try:
        yield server
    finally:
        server.stop()


def url(server: PostgresServer, database: str) -> str:
    return f"postgresql+psycopg2://linc:{TOKEN}@{LOOPBACK}:{server.port}/{database}"


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: float = 400) -> str:
    """A ``linc-*`` entry point (``python -m sweeps.X``) in a process of its own; its console."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
    console = done.stdout + done.stderr
    assert done.returncode == 0, console[-3000:]
    print(f"{command[0]}: {time.monotonic() - started:.0f} s")
    return console


def hits_in_files(folder: Path) -> tuple[int, list[str]]:
    """(files scanned, the files holding a secret) under ``folder``."""
    scanned, found = 0, []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and not path.is_socket():
            scanned += 1
            content = path.read_bytes()
            if any(form in content for form in SECRET_FORMS):
                found.append(str(path))
    return scanned, found


def test_a_sweep_and_a_search_leave_no_secret_anywhere(guarded_postgres, tmp_path) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    work = tmp_path / "work"
    work.mkdir()
    ray_temp = Path(tempfile.mkdtemp(prefix="lr-", dir="/tmp"))  # short: Ray's socket paths
    env = sweep_env(
        RAY_TMPDIR=str(ray_temp),
        AWS_ACCESS_KEY_ID=AWS_KEY_ID,
        AWS_SECRET_ACCESS_KEY=AWS_SECRET,
        AWS_DEFAULT_REGION="us-east-1",
    )
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    s3 = S3Server().start()
    server = MlflowServer(tmp_path / "server", backend=url(guarded_postgres, "mlflowserver"))
    try:
        began = time.monotonic()
        server.start()
        print(f"servers: {time.monotonic() - began:.0f} s")
        sweep_console = run(
            ["sweeps.train", "preset=smoke", "train.epochs=1",
             f"tracking.uri={url(guarded_postgres, 'mlflow')}",
             f"cluster.storage='{s3.uri('runs')}'"],
            work, env,
        )  # fmt: skip
        http_uri = f"http://linc:{TOKEN}@{LOOPBACK}:{server.port}"
        search = [
            "sweeps.hpo", "preset=smoke", "train.epochs=1", "search.num_samples=2",
            f"tracking.uri={http_uri}", f"search.storage={url(guarded_postgres, 'optuna')}",
            f"cluster.storage={work / 'runs'}",
        ]  # fmt: skip
        search_console = run(search, work, env)
        # the same command again resumes the search from its masked state: the same parent
        # run, the study's storage reconnected with the real password
        search_console += run(search, work, env)

        # the sweep and the search worked, with the real secrets
        for store, kind in ((url(guarded_postgres, "mlflow"), "train"), (http_uri, "search")):
            client = MlflowClient(tracking_uri=store)
            experiment = client.get_experiment_by_name("linc-smoke")
            runs = client.search_runs([experiment.experiment_id])
            trials = [r for r in runs if r.data.tags.get("kind") != "sweep"]
            assert {r.info.status for r in runs} == {"FINISHED"}, kind
            assert trials and all("validation_cost" in r.data.metrics for r in trials), kind
        [parent] = [r for r in runs if r.data.tags.get("kind") == "sweep"]
        assert len(trials) == 2 and "Traceback" not in search_console
        # Tune pickled the study's storage masked, and the re-run reconnected it all the same
        assert b"linc:***@" in (work / "runs" / "hpo-smoke" / "tuner.pkl").read_bytes()
        assert parent.data.params["sweep.storage"].startswith("postgresql+psycopg2://linc:***@")
        study = optuna.load_study(study_name="hpo-smoke", storage=url(guarded_postgres, "optuna"))
        assert len(study.trials) == 2
        assert "View run" not in search_console  # MLflow's own links, password and all
        import boto3

        bucket = boto3.resource("s3", endpoint_url=s3.endpoint).Bucket(s3.bucket)
        objects = {o.key: o.get()["Body"].read() for o in bucket.objects.all()}
        assert any(key.endswith("tuner.pkl") for key in objects)

        # ... and left their secrets nowhere
        hits: dict[str, list[str]] = {}
        scanned: dict[str, int] = {}
        for database in DATABASES:
            dump = subprocess.run(
                _postgres_command(
                    "pg_dump", "-h", str(guarded_postgres.folder), "-p",
                    str(guarded_postgres.port), "-U", "postgres", database,
                ),
                capture_output=True, check=True,
            ).stdout  # fmt: skip
            assert b"COPY public." in dump
            scanned[f"pg_dump {database}"] = 1
            hits[f"pg_dump {database}"] = [database] if any(f in dump for f in SECRET_FORMS) else []
        scanned["s3 objects"] = len(objects)
        hits["s3 objects"] = [k for k, v in objects.items() if any(f in v for f in SECRET_FORMS)]
        for name, folder in (
            ("work (storage, artifacts)", work),
            ("server artifacts", server.folder / "artifacts"),
            ("ray session logs", ray_temp),
        ):
            scanned[name], hits[name] = hits_in_files(folder)
        # the trials' artifacts were among them: the direct store's (./mlruns of the command)
        # and the server's
        for folder in (work / "mlruns", server.folder / "artifacts"):
            assert any(path.name == "config.json" for path in folder.rglob("*")), folder
        console = (sweep_console + search_console).encode()
        scanned["console"], hits["console"] = 3, [f for f in SECRET_FORMS if f in console]
        print(f"\nscanned: {scanned}\nhits: {hits}")
        # not linc's: the server was started with the password on its command line
        server_log = (server.folder / "server.log").read_bytes()
        print(f"mlflow server's own log: {sum(server_log.count(f) for f in SECRET_FORMS)} hits")
        assert sum(scanned.values()) > 100
        assert not any(hits.values()), hits
        assert "postgresql+psycopg2://linc:***@" in sweep_console  # the store named, masked
    finally:
        server.stop()
        s3.stop()
        shutil.rmtree(ray_temp, ignore_errors=True)


REFUSALS = [
    # (entry point, overrides, the line's start, its reason)
    (
        "train",
        [f"tracking.uri=postgresql+psycopg2://linc:{TOKEN}@{LOOPBACK}:PORT/mlflow"],
        "linc-tune: tracking.uri: the database postgresql+psycopg2://linc:***@",
        "Connection refused",
    ),
    (
        "train",
        [f"tracking.uri=http://linc:{TOKEN}@{LOOPBACK}:PORT"],
        "linc-tune: tracking.uri: the store http://linc:***@",
        "Connection refused",
    ),
    (
        "hpo",
        [f"search.storage=postgresql+psycopg2://linc:{TOKEN}@{LOOPBACK}:PORT/optuna"],
        "linc-hpo: search.storage: the database postgresql+psycopg2://linc:***@",
        "Connection refused",
    ),
    (
        "train",
        [f"cluster.storage='s3://linc/runs?endpoint_override={LOOPBACK}:PORT&secret_key={TOKEN}'"],
        "linc-tune: cluster.storage: cannot write to s3://linc/runs?endpoint_override=",
        "secret_key=***: unknown S3 URI parameter(s) ['secret_key']",
    ),
    (
        "generate",
        [f"uri=s3://linc:{TOKEN}@bucket/set", "count=4", "shard_size=2"],
        "linc-generate: uri: s3://linc:***@bucket/set",
        "an S3 URI names no user or key",
    ),
]


@pytest.mark.parametrize(("entry", "overrides", "says", "because"), REFUSALS)
def test_a_refusal_is_one_line_with_the_secret_masked(
    entry: str, overrides: list[str], says: str, because: str, tmp_path, capsys, monkeypatch
) -> None:
    from importlib import import_module

    monkeypatch.chdir(tmp_path)
    port = free_port()  # nothing listens there
    argv = [o.replace("PORT", str(port)) for o in overrides]
    if entry != "generate":
        argv.append("preset=smoke")
        if not argv[0].startswith("cluster.storage"):
            argv.append(f"cluster.storage={tmp_path / 'runs'}")
    started = time.monotonic()
    assert import_module(f"sweeps.{entry}").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and because in err and err.count("\n") == 1, err
    assert TOKEN not in err
    assert time.monotonic() - started < 30
