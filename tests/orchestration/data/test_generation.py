"""Distributed data set generation on a local Ray, to a local folder and to a moto S3 server.

One Ray session (``ray_session`` in conftest) and the session's moto server (``s3_server``)
serve the whole module. Every generation run reuses one small reference config so runs can be
compared byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from faults.servers import S3Server
from linc_core.instances import TENSOR_FIELDS, Instance
from linc_core.instances.datasets import MANIFEST_NAME, load_dataset, shard_name
from linc_core.problems.cvrptw import generate_cvrptw_envelope
from linc_core.utils.seeding import derive_seed
from linc_core.utils.typed import ConfigError, build
from orchestration.data.definition import DatagenConfig
from orchestration.data.generation import DatagenError, ShardResult, generate_dataset
from orchestration.data.storage import (
    StorageUnavailableError,
    load_evaluation_set,
    open_filesystem,
    open_training_data,
)
from tests.conftest import fresh_python, tiny_configs

REFERENCE = {
    "task": "cvrptw",
    "size": 20,
    "count": 230,
    "shard_size": 40,  # 6 shards, the last one 30 rows
    "seed": 11,
    "split": "train",
    "workers": 2,
    "cpus_per_worker": 1.0,
    "progress": False,
}


def config(uri: str, **changes: object) -> DatagenConfig:
    return build(DatagenConfig, {**REFERENCE, "uri": uri, **changes}, "")


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def reference_set(ray_session, tmp_path_factory) -> Path:
    """The reference config generated once, uninterrupted, to a local folder."""
    root = tmp_path_factory.mktemp("datagen") / "reference"
    generate_dataset(config(str(root)))
    return root


# ------------------------------------------------------------------------------ config
def test_config_rejects_unknown_keys_and_bad_values() -> None:
    with pytest.raises(ConfigError, match=r"^unknown key\(s\) \['shards'\]"):
        config("x", shards=3)
    with pytest.raises(
        ConfigError, match=r"^task: expected one of \(.*\), got 'vrp' \(did you mean 'cvrp'\?\)$"
    ):
        config("x", task="vrp")
    with pytest.raises(ConfigError, match=r"^cpus_per_worker: expected > 0, got 0.0$"):
        config("x", cpus_per_worker=0)
    with pytest.raises(ConfigError, match="^count: expected int, got True$"):
        config("x", count=True)
    with pytest.raises(ConfigError, match=r"^split: expected .*, got 'a/b'$"):
        config("x", split="a/b")
    with pytest.raises(ConfigError, match=r"^missing key\(s\) \['count'\]"):
        build(DatagenConfig, {"shard_size": 4}, "")
    assert config("x", cpus_per_worker=0.5).ray_cpus == 1


def test_linc_generate_composes_and_refuses_bad_config_in_one_line(capsys) -> None:
    from sweeps.generate import load_config, main

    loaded = load_config(["task=cvrp", "size=50", "count=10", "shard_size=5"])
    assert (loaded.task, loaded.size, loaded.uri) == ("cvrp", 50, "data/cvrp50-train")
    assert main(["task=vrp"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("linc-generate: invalid config: task: expected one of")
        and err.count("\n") == 1
    )
    assert main(["colour=red"]) == 2  # Hydra's refusal, also one line
    assert capsys.readouterr().err.count("\n") == 1


def test_linc_generate_refuses_a_local_uri_it_cannot_write_before_ray_starts(
    tmp_path: Path,
) -> None:
    """In a process of its own: this one may hold another test's Ray session."""
    regular = tmp_path / "regular"
    regular.write_text("x")
    small = ["task=cvrp", "size=20", "count=4", "shard_size=2", "workers=1"]
    cases = [
        ("/proc/nope/x", "No such file or directory"),
        (f"{regular}/set", "Not a directory"),
        (f"file://{regular}/set", "Not a directory"),
    ]
    out = fresh_python(
        "import contextlib, io, json\n"
        "import ray\n"
        "from sweeps.generate import main\n"
        f"for uri in {[uri for uri, _ in cases]!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        f"        code = main({small!r} + [f'uri={{uri}}'])\n"
        "    print(json.dumps([code, err.getvalue(), ray.is_initialized()]))\n"
    )
    results = [json.loads(line) for line in out.splitlines()]
    for (uri, reason), (code, err, ray_started) in zip(cases, results, strict=True):
        shown = uri.removeprefix("file://")
        assert (code, ray_started) == (2, False), uri
        assert err == f"linc-generate: uri: cannot write to {shown} ({reason})\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["regular"]


# ------------------------------------------------------------------------------ local
def test_same_config_gives_identical_bytes_and_exact_instances(
    reference_set: Path, tmp_path: Path
) -> None:
    # A different pool shape must not change a single byte.
    generate_dataset(config(str(tmp_path / "again"), workers=1, cpus_per_worker=0.5))
    assert folder_bytes(tmp_path / "again") == folder_bytes(reference_set)
    assert len(folder_bytes(reference_set)) == 6 + 1

    loaded = load_dataset(str(reference_set))
    expected = []
    for index in range(6):
        rows = min(40, 230 - 40 * index)
        seed = derive_seed(11, "cvrptw", 20, "train", index)
        expected.append(generate_cvrptw_envelope(rows, 20, seed))
    direct = Instance.concat(expected)
    for name in TENSOR_FIELDS:
        assert torch_equal_bits(getattr(loaded, name), getattr(direct, name)), name
    assert loaded.names[0] == "cvrptw20-train-0000000" and len(set(loaded.names)) == 230


def torch_equal_bits(a, b) -> bool:
    import torch

    return a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_rerun_keeps_valid_shards(reference_set: Path) -> None:
    before = folder_bytes(reference_set)
    statuses: list[ShardResult] = []
    generate_dataset(config(str(reference_set)), on_shard_done=statuses.append)
    assert sorted(r.status for r in statuses) == ["kept"] * 6
    assert folder_bytes(reference_set) == before


def test_killed_worker_then_rerun_equals_uninterrupted_run(
    reference_set: Path, tmp_path: Path
) -> None:
    root = tmp_path / "killed"
    killed: list[int] = []

    def kill_first_worker(result: ShardResult) -> None:
        if not killed:
            killed.append(result.worker_pid)
            os.kill(result.worker_pid, signal.SIGKILL)

    with pytest.raises(DatagenError, match="worker died"):
        generate_dataset(config(str(root), max_actor_restarts=0), on_shard_done=kill_first_worker)
    assert not (root / MANIFEST_NAME).exists()
    survivors = {p.name for p in root.iterdir()}
    assert len(survivors) < 6

    statuses: list[ShardResult] = []
    generate_dataset(config(str(root)), on_shard_done=statuses.append)
    assert {r.status for r in statuses} <= {"kept", "generated"}
    assert sum(r.status == "kept" for r in statuses) >= 1
    assert folder_bytes(root) == folder_bytes(reference_set)  # nothing lost, nothing extra


def test_corrupt_truncated_and_missing_shards_are_regenerated(
    reference_set: Path, tmp_path: Path
) -> None:
    root = tmp_path / "damaged"
    root.mkdir()
    for name, data in folder_bytes(reference_set).items():
        (root / name).write_bytes(data)

    def damage() -> None:
        cut = root / shard_name(1)
        cut.write_bytes(cut.read_bytes()[:500])
        flip = bytearray((root / shard_name(2)).read_bytes())
        flip[len(flip) // 3] ^= 0x01
        (root / shard_name(2)).write_bytes(bytes(flip))
        (root / shard_name(4)).unlink()

    # With a manifest: checksums catch everything.
    damage()
    results: dict[int, ShardResult] = {}
    generate_dataset(config(str(root)), on_shard_done=lambda r: results.__setitem__(r.index, r))
    assert results[1].status == results[2].status == "regenerated"
    assert results[4].status == "generated" and results[0].status == "kept"
    assert folder_bytes(root) == folder_bytes(reference_set)

    # Without a manifest: the shards are parsed (page CRCs, schema, row count, seed metadata).
    (root / MANIFEST_NAME).unlink()
    damage()
    results.clear()
    generate_dataset(config(str(root)), on_shard_done=lambda r: results.__setitem__(r.index, r))
    assert results[1].status == results[2].status == "regenerated"
    assert "unreadable" in results[1].reason and "unreadable" in results[2].reason
    assert folder_bytes(root) == folder_bytes(reference_set)


def test_a_file_over_the_readers_cap_is_never_read_whole(
    reference_set: Path, tmp_path: Path
) -> None:
    """A shard over the readers' cap is regenerated without being read (a 3 GB sparse file:
    read whole, it took 3 GB of memory); a manifest over its cap is refused in one line."""
    root = tmp_path / "huge"
    root.mkdir()
    for name, data in folder_bytes(reference_set).items():
        (root / name).write_bytes(data)
    os.truncate(root / shard_name(3), 3 * 1024**3)
    results: dict[int, ShardResult] = {}
    generate_dataset(config(str(root)), on_shard_done=lambda r: results.__setitem__(r.index, r))
    assert results[3].status == "regenerated"
    assert results[3].reason.endswith(
        f"{shard_name(3)}: field '<file>' = '3 GiB': larger than the 2 GiB this reader accepts"
    )
    assert folder_bytes(root) == folder_bytes(reference_set)
    os.truncate(root / MANIFEST_NAME, 3 * 1024**3)
    with pytest.raises(DatagenError) as err:
        generate_dataset(config(str(root)))
    told = f"{MANIFEST_NAME}: field '<file>' = '3 GiB': larger than the 64 MiB this reader accepts"
    assert told in str(err.value)
    assert (root / MANIFEST_NAME).stat().st_size == 3 * 1024**3  # left as it was


def test_files_that_are_no_regular_files_of_the_folder_are_never_read(
    reference_set: Path, tmp_path: Path
) -> None:
    """A re-run reads the folder as every reader does: a shard linked out of the folder or a
    named pipe is refused unread and replaced by a real shard; a manifest that is a named pipe
    (it hung the re-run) or a link to /dev/zero (20 GB in a minute) is refused in one line."""
    root = tmp_path / "odd"
    root.mkdir()
    for name, data in folder_bytes(reference_set).items():
        (root / name).write_bytes(data)
    outside = tmp_path / "elsewhere.parquet"
    outside.write_bytes((root / shard_name(1)).read_bytes())
    (root / shard_name(1)).unlink()
    (root / shard_name(1)).symlink_to(outside)
    (root / shard_name(2)).unlink()
    os.mkfifo(root / shard_name(2))
    results: dict[int, ShardResult] = {}
    generate_dataset(config(str(root)), on_shard_done=lambda r: results.__setitem__(r.index, r))
    assert results[1].status == results[2].status == "regenerated"
    assert results[1].reason.endswith("a link leading out of the data set")
    assert "named pipe" in results[2].reason or "not a regular file" in results[2].reason
    assert folder_bytes(root) == folder_bytes(reference_set)  # real files now
    assert not (root / shard_name(1)).is_symlink() and outside.exists()
    for odd in ("fifo", "zero"):
        (root / MANIFEST_NAME).unlink()
        if odd == "fifo":
            os.mkfifo(root / MANIFEST_NAME)
        else:
            (root / MANIFEST_NAME).symlink_to("/dev/zero")
        with pytest.raises(DatagenError) as err:
            generate_dataset(config(str(root)))
        told = str(err.value)
        assert told.startswith(f"{root}/{MANIFEST_NAME}: field '<file>' = ") and "\n" not in told
        assert told.endswith("; choose another uri or delete it")


def test_different_config_at_same_uri_is_refused(reference_set: Path) -> None:
    with pytest.raises(DatagenError, match="different data set"):
        generate_dataset(config(str(reference_set), seed=12))


# ------------------------------------------------------------------------------ S3
@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (lambda text: text.replace('"shard-00000', '"../x/shard-00000'), "shards[0].file"),
        (lambda text: text[: len(text) // 2], "not a JSON manifest"),
        (lambda text: "[]", "not a manifest"),
    ],
)  # fmt: skip
def test_a_tampered_manifest_is_refused_in_one_line(reference_set: Path, tmp_path, tamper, said):
    """A re-run reads the folder's manifest for the shards' checksums: a shard named outside
    the folder, a truncated or a wrongly shaped manifest is one error, nothing written."""
    root = tmp_path / "copy"
    root.mkdir()
    for name, data in folder_bytes(reference_set).items():
        (root / name).write_bytes(data)
    manifest = root / MANIFEST_NAME
    manifest.write_text(tamper(manifest.read_text()))
    before = folder_bytes(root)
    with pytest.raises(DatagenError) as err:
        generate_dataset(config(str(root)))
    assert said in str(err.value) and "\n" not in str(err.value)
    assert folder_bytes(root) == before


def test_s3_generation_matches_local_bytes_and_reads_back(
    reference_set: Path, s3_server: S3Server
) -> None:
    uri = s3_server.uri("sets/ref")
    generate_dataset(config(uri))
    filesystem, root = open_filesystem(uri)
    for name, data in folder_bytes(reference_set).items():
        with filesystem.open_input_stream(f"{root}/{name}") as stream:
            assert stream.read() == data, name

    statuses: list[ShardResult] = []
    generate_dataset(config(uri), on_shard_done=statuses.append)
    assert {r.status for r in statuses} == {"kept"}

    local = load_dataset(str(reference_set))
    remote = load_evaluation_set(uri)
    assert remote.names == local.names
    for name in TENSOR_FIELDS:
        assert torch_equal_bits(getattr(remote, name), getattr(local, name)), name
    batches = open_training_data(uri, batch_size=32, seed=3)
    assert batches.batches_per_epoch == 230 // 32
    assert batches.batch(0, 0).batch_size == 32


def test_s3_unreachable_fails_after_bounded_retries() -> None:
    closed = free_port()  # nothing listens there
    uri = f"s3://linc/nowhere?endpoint_override=127.0.0.1:{closed}&scheme=http"
    start = time.perf_counter()
    with pytest.raises(StorageUnavailableError, match=r"after 2 attempts") as info:
        generate_dataset(config(uri, storage_attempts=2))
    assert time.perf_counter() - start < 30
    assert "s3://linc/nowhere" in str(info.value) and "endpoint_override" not in str(info.value)


def test_fit_trains_on_a_generated_data_set(reference_set: Path) -> None:
    """The plain fit loop reads a generated set through ShardedTrainingData (no Ray needed)."""
    from linc_core.model import LincPolicy
    from linc_core.train import fit
    from linc_core.train.data import ShardedTrainingData

    data = ShardedTrainingData(str(reference_set), batch_size=4, seed=0)
    model, train = tiny_configs(
        "full_linc",
        REFERENCE["task"],
        num_rollouts=4,
        batch_size=4,
        instances_per_epoch=8,
        epochs=1,
    )
    result = fit(LincPolicy(model), train, data, max_steps=2)
    assert result.global_step == 2
    assert data.batch(0, 0).num_customers == REFERENCE["size"]
