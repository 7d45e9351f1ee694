"""What many test files share: the benchmark data folder, one local Ray, and tiny models.

Benchmark data (``data_dir``) is ``$LINC_DATA_DIR``, else ``<checkout>/../shared/data``; the
golden vectors (``tests.golden``) are ``$LINC_GOLDEN_DIR``, else
``<checkout>/../shared/spec/golden``. A test that needs either and cannot find it fails with one
line naming the folders looked in and the variable to set; it never skips. From a worktree::

    export LINC_DATA_DIR=/work/shared/data LINC_GOLDEN_DIR=/work/shared/spec/golden

Tiny models (``tiny_configs``, ``tiny_policy``, ``tiny_checkpoint``): one small network size for
every test whose claim does not depend on width (exact equalities, invariances, feasibility);
``tiny_policy_model`` is one as linc's MLflow pyfunc model, and ``served_model`` runs a real
``mlflow models serve`` of a model on loopback. The model tests drive them with
``make_instances`` (a float64 batch of any problem), ``rollout_inputs`` (z and forced starts as
a config's rollout takes them) and ``drive`` (the decoding loop, every step's scores exposed).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from faults.servers import S3_TEST_ENVIRONMENT, S3Server
from linc_core.config import ModelConfig, TrainConfig
from linc_core.instances import Instance
from linc_core.instances.benchmarks import data_dir as resolve_data_dir
from linc_core.model import LincPolicy, row_seeds, sample_z
from linc_core.presets import preset_configs
from linc_core.problems import generate_cvrp, generate_cvrptw_envelope, generate_tsp, make_env
from linc_core.runs.memory_limit import memory_cgroups
from linc_core.train.checkpoint import build_payload, save_checkpoint
from orchestration.ray_session import init_ray, prefer_loopback

# Test tensors are small: one intra-op thread avoids OpenMP spin-waiting when the 2 CPUs are
# shared (another pytest, a Ray worker), which slows small ops down by an order of magnitude.
torch.set_num_threads(1)

# Before `ray` is first imported, so every socket of the test session listens on 127.0.0.1.
prefer_loopback()

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fresh_python(script: str, timeout: float = 120) -> str:
    """The standard output of ``script`` run by a new interpreter (a process whose imports,
    heap and peak memory are its own); a failing script fails the test with its stderr."""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def refusals_in_fresh_process(
    imports: str, calls: list[str], error_type: str, memory_limit: int = 8 * 1024**3
) -> list[tuple[float, str]]:
    """``(seconds, message)`` of each of ``calls`` (Python statements, e.g.
    ``"load_tensor_file('/tmp/fifo.pt')"``, run after the lines ``imports``) refused with
    ``error_type`` (a name ``imports`` defines), run in order by one :func:`fresh_python`.

    The process has ``memory_limit`` bytes of address space, so a read of a device or of a huge
    file ends there in a ``MemoryError`` instead of filling this machine; that, any other error
    or a call still running after 60 s fails the test; a call that returns gives the message
    ``"returned"``. A message keeps its newlines, for the test to see them."""
    timed = "".join(
        "start = time.monotonic()\n"
        "try:\n"
        f"    {call}\n"
        "    message = 'returned'\n"
        f"except {error_type} as err:\n"
        "    message = str(err)\n"
        "print(json.dumps([time.monotonic() - start, message]))\n"
        for call in calls
    )
    limit = f"resource.setrlimit(resource.RLIMIT_AS, ({memory_limit}, {memory_limit}))\n"
    out = fresh_python(f"import json, resource, time\n{imports}\n{limit}{timed}", timeout=60)
    return [tuple(json.loads(line)) for line in out.splitlines()]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the session (``faults.servers.S3Server``: its own process on
    127.0.0.1, a bucket ``linc``) with test AWS keys in the environment while it runs, never a
    developer's own. Each test keeps to its own prefix (``s3_server.uri(prefix)``)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in S3_TEST_ENVIRONMENT.items():
            patch.setenv(key, value)
        server = S3Server().start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def memory_cgroup() -> Iterator[Callable[[int], list[str]]]:
    """``confine(limit_bytes) -> argv prefix``: a command started with the prefix runs in a new
    child of this process's memory cgroup, limited to ``limit_bytes`` (the kernel kills it past
    that, as a container's limit does). Version 1 or 2, whichever gives a child a limit file;
    needs root. The cgroups are removed after the test."""
    made: list[Path] = []

    def confine(limit_bytes: int) -> list[str]:
        for cgroup in memory_cgroups():
            child = cgroup.directory / f"linc-test-{os.getpid()}-{len(made)}"
            try:
                child.mkdir()
            except OSError:
                continue
            made.append(child)
            if (child / cgroup.limit_file).exists():
                (child / cgroup.limit_file).write_text(str(limit_bytes))
                join = f'echo $$ > {shlex.quote(str(child / "cgroup.procs"))} && exec "$@"'
                return ["sh", "-c", join, "sh"]
        pytest.skip("no memory cgroup this process may make a limited child of (needs root)")

    yield confine
    for child in made:
        for _ in range(50):  # the confined process leaves its cgroup as it is reaped
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)


REPO = Path(__file__).resolve().parents[1]
# What a refused ``--device cuda:N`` says of this machine (CI's: none visible).
CUDA_DEVICES_SEEN = (
    f"{torch.cuda.device_count()} visible to this PyTorch"
    if torch.cuda.device_count()
    else "none visible to this PyTorch"
)


def sweep_env(**extra: str) -> dict[str, str]:
    """The environment of a sweep a test starts as a subprocess: this one without an outer Ray
    address or MLflow URI (the sweep starts its own local Ray and reads its own store), output
    unbuffered, the checkout importable from any working directory, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    fixed = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONUNBUFFERED": "1"}
    return env | fixed | {"PYTHONPATH": str(REPO)} | extra


# The network size of the tiny models: a preset's switches with these widths.
TINY_NETWORK: dict[str, int] = {
    "embedding_dim": 32,
    "encoder_layers": 1,
    "num_heads": 4,
    "ff_hidden_dim": 64,
    "poly_hidden_dim": 32,
    "scorer_hidden_dim": 16,
}


@pytest.fixture(autouse=True)
def _keep_mlflow_tracking_uri():
    """``mlflow.set_tracking_uri`` writes ``$MLFLOW_TRACKING_URI``, which every later command
    of the session would then take as its store: put it back after each test."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if before is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = before


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The benchmark data folder; fails (one line, naming ``LINC_DATA_DIR``) when absent."""
    try:
        return resolve_data_dir()
    except FileNotFoundError as missing:
        message = str(missing)
    pytest.fail(message, pytrace=False)  # outside the except: no chained traceback


def answer_json(url: str, body: dict | None = None, seconds: float = 60.0) -> dict:
    """The JSON answer of a server on loopback that may still be starting: GET ``url`` (or POST
    ``body`` as JSON), retried every half second until it answers or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    data = None if body is None else json.dumps(body).encode()
    while True:
        request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - loopback
                return json.loads(response.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="session")
def postgres():
    """A throw-away PostgreSQL 15 cluster on 127.0.0.1 (``faults.servers.PostgresServer``):
    yields its database's SQLAlchemy URL; stopped at the end."""
    from faults.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start()
    except RuntimeError as err:
        server.stop()
        pytest.fail(str(err), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


CHROMIUM_FLAGS = (
    # No sandbox (CI runs as root); no background networking, which this closed network refuses.
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture(scope="session")
def chromium():
    """Headless Chromium driven by Playwright: ``$LINC_CHROMIUM``, else Debian's
    ``/usr/bin/chromium`` (``apt-get install chromium``; ``.ci/run`` installs it). Missing, the
    test fails in CI (``$CI`` set) and is skipped with that line elsewhere."""
    executable = os.environ.get("LINC_CHROMIUM", "/usr/bin/chromium")
    if not Path(executable).exists():
        reason = f"no Chromium at {executable}: apt-get install chromium, or set LINC_CHROMIUM"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=list(CHROMIUM_FLAGS)
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray (2 CPUs, no dashboard) shared by every test that needs it."""
    import ray  # after prefer_loopback(), which must run before Ray's first import

    # "local": always a fresh Ray of this process, even when another program's head is up
    init_ray("local", num_cpus=2, log_to_driver=False)
    yield ray
    ray.shutdown()


def tiny_configs(
    preset: str = "full_linc", problem: str = "cvrptw", **train: Any
) -> tuple[ModelConfig, TrainConfig]:
    """``preset_configs(preset, problem, **train)`` with the model cut to ``TINY_NETWORK``."""
    model, train_config = preset_configs(preset, problem, **train)
    return dataclasses.replace(model, **TINY_NETWORK), train_config


def tiny_policy(
    preset: str = "full_linc",
    problem: str = "cvrptw",
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> LincPolicy:
    """A tiny ``preset`` policy with PyTorch's default initialisation under ``seed``, in eval
    mode."""
    torch.manual_seed(seed)
    return LincPolicy(tiny_configs(preset, problem)[0]).to(dtype).eval()


def make_instances(problem: str, batch: int, size: int, seed: int) -> Instance:
    """``size`` customers (CVRP/CVRPTW) or cities (TSP), float64."""
    if problem == "cvrptw":
        instance = generate_cvrptw_envelope(batch, size, seed)
    elif problem == "cvrp":
        instance = generate_cvrp(batch, size, seed, capacity=20.0)
    else:
        instance = generate_tsp(batch, size, seed)
    return instance.to(dtype=torch.float64)


def rollout_inputs(
    policy: LincPolicy, batch: int, k: int, seed: int
) -> tuple[Tensor | None, Tensor | None]:
    """(z, forced starts) as ``LincPolicy.rollout`` expects them for this config."""
    z = None
    if policy.config.z_dim > 0:
        z = sample_z(row_seeds(seed, batch), k, policy.config.z_dim)
    starts = None
    if policy.config.z_dim == 0:  # POMO multi-start: rollout k starts at customer / city k + 1
        starts = torch.arange(1, k + 1).expand(batch, k).clone()
    elif policy.config.problem == "tsp":
        starts = torch.zeros(batch, k, dtype=torch.long)
    return z, starts


def drive(
    policy: LincPolicy,
    instance: Instance,
    k: int,
    z: Tensor | None,
    starts: Tensor | None,
    choose: Callable[[int, Tensor, Tensor], Tensor],
) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The decoding loop of ``LincPolicy.rollout``, exposing every step.

    ``choose(step, log_probs, mask) -> action``. Returns, per step, (raw scores u, log-probs,
    mask) of the state the action was chosen in.
    """
    env = make_env(instance, k)
    cache, time_scale = policy.encode(instance)
    state = env.reset()
    if starts is not None:
        assert bool(state.mask.gather(-1, starts.unsqueeze(-1)).all())
        state = env.step(state, starts)
    records = []
    for step in range(env.max_steps):
        if bool(state.finished.all()):
            break
        scores = policy.step_scores(env, state, cache, time_scale, z)
        log_probs = policy.log_probs(scores, state.mask)
        action = choose(step, log_probs, state.mask)
        records.append((scores, log_probs, state.mask))
        state = env.step(state, action)
    assert bool(state.finished.all())
    return records


def tiny_checkpoint(path: Path, preset: str = "full_linc", problem: str = "cvrptw") -> Path:
    """``tiny_policy(preset, problem)`` saved as an untrained (epoch 0) training checkpoint at
    ``path``, with the preset's training config."""
    policy = tiny_policy(preset, problem)
    payload = build_payload(
        model_config=policy.config,
        train_config=tiny_configs(preset, problem)[1],
        model_state=policy.state_dict(),
        optimizer_state=None,
        epoch=0,
        global_step=0,
        history=[],
        data_id="test",
    )
    return save_checkpoint(path, payload)


@pytest.fixture(scope="session")
def tiny_policy_model(tmp_path_factory) -> Path:
    """``tiny_checkpoint()`` saved as linc's pyfunc policy model (the code, artifact, code path
    and signature :func:`orchestration.tracking.registry.register_run` logs): its folder."""
    import mlflow

    import linc_core
    from orchestration.tracking.registry import POLICY_MODEL_CODE, signature

    folder = tmp_path_factory.mktemp("policy-model")
    checkpoint = tiny_checkpoint(folder / "checkpoint" / "checkpoint.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mlflow.pyfunc.save_model(
            str(folder / "model"),
            python_model=str(POLICY_MODEL_CODE),
            artifacts={"checkpoint": str(checkpoint)},
            code_paths=[str(Path(linc_core.__file__).parent)],
            signature=signature(),
        )
    return folder / "model"


@dataclasses.dataclass
class ServedModel:
    """A running ``mlflow models serve``: its base URL and process (the group's leader)."""

    url: str
    process: subprocess.Popen


@contextmanager
def served_model(
    model_uri: str, env: dict[str, str] | None = None, seconds: float = 180
) -> Iterator[ServedModel]:
    """``mlflow models serve -m model_uri --env-manager local`` on a free port of 127.0.0.1,
    with ``env`` added to the environment; yields once ``/ping`` answers, stops it after."""
    from faults.servers import free_port

    port = free_port()
    bin_dir = Path(sys.executable).parent  # where uvicorn is, for mlflow's scoring server
    environ = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}"} | (env or {})
    command = [str(bin_dir / "mlflow"), "models", "serve", "-m", model_uri]
    options = ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    server = subprocess.Popen(
        [*command, *options], env=environ, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + seconds
        while True:
            assert server.poll() is None, f"mlflow models serve -m {model_uri} ended"
            try:
                with urllib.request.urlopen(f"{url}/ping", timeout=5):  # noqa: S310 - loopback
                    break
            except OSError:
                assert time.monotonic() < deadline, f"no /ping answer within {seconds} s"
                time.sleep(0.5)
        yield ServedModel(url, server)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
            server.wait(timeout=60)


class Trap:
    """What an intruder who can write the shared storage leaves where a pickle is read: it
    touches ``marker`` when unpickled (any code could run there)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def trapped_pickle(marker: Path) -> bytes:
    """A :class:`Trap`'s pickle, checked to fire when Ray's cloudpickle loads it."""
    import ray

    payload = ray.cloudpickle.dumps(Trap(marker))
    ray.cloudpickle.loads(payload)  # as Tune reads its pickles: the trap does fire
    assert marker.exists()
    marker.unlink()
    return payload
