"""A data set folder read back: its manifest is checked field by field, and no shard name or
link in it reaches a file outside the folder (real files, real links). Its size caps:
test_dataset_caps.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from linc_core.instances import Instance
from linc_core.instances.datasets import (
    MANIFEST_NAME,
    ShardEntry,
    _open_local,  # the open of a local shard's footer
    _read_capped,  # the read of every manifest and shard
    list_shards,
    load_dataset,
    load_shard,
    read_manifest,
    resolve_filesystem,
    shard_entries,
    shard_name,
)
from linc_core.instances.parquet import DatasetSchemaError
from tests.conftest import refusals_in_fresh_process
from tests.linc_core.instances.dataset_files import (
    DATASET_SCHEMA_ERROR,
    READERS,
    SHARD,
    assert_one_line,
    write_manifest,
    write_shard,
)


def every_reader(root: Path) -> list:
    """The ways a data set is opened: each call reads the manifest or a shard."""
    fs, path = resolve_filesystem(str(root))
    return [
        lambda: load_dataset(str(root)),
        lambda: list_shards(str(root)),
        lambda: read_manifest(str(root)),
        lambda: shard_entries(str(root), fs, path),
    ]


@pytest.fixture
def victim(tmp_path: Path) -> dict:
    """A sibling data set whose shard an attacker's manifest would like to load."""
    return write_shard(tmp_path / "victim", seed=7)


@pytest.mark.parametrize(
    "file",
    [
        "../victim/shard-00000.parquet",
        "../../../../../etc/passwd",
        "/etc/passwd",
        "VICTIM_ABSOLUTE",
        "..\\victim\\shard-00000.parquet",
        "shard-00000.parquet/../../victim/shard-00000.parquet",
        "./shard-00000.parquet",
        "%2e%2e/victim/shard-00000.parquet",
        "..",
        "",
        "shard-00000.parquet\x00",
        "shard-00000.parquet\n",
        "shard-\u0660\u0660\u0660\u0660\u0660.parquet",  # Arabic-Indic digits
        7,
        None,
    ],
)
def test_a_manifest_cannot_name_a_file_outside_its_folder(
    tmp_path: Path, victim: dict, file: object
) -> None:
    if file == "VICTIM_ABSOLUTE":
        file = str(tmp_path / "victim" / SHARD)
    root = write_manifest(tmp_path / "attacker", [victim | {"file": file}])
    for read in every_reader(root):
        with pytest.raises(DatasetSchemaError) as err:
            read()
        message = assert_one_line(err, f"{root}/{MANIFEST_NAME}", "shards[0].file")
        assert err.value.value == file and "shard-NNNNN.parquet" in message
    # A URI names the same folder; its query (where S3 credentials may sit) stays out of errors.
    with pytest.raises(DatasetSchemaError) as err:
        load_dataset(f"file://{root}?secret_key=hunter2")
    assert "hunter2" not in str(err.value) and err.value.field == "shards[0].file"


def test_a_crafted_shard_entry_is_refused_too(tmp_path: Path, victim: dict) -> None:
    root = tmp_path / "attacker"
    root.mkdir()
    fs, path = resolve_filesystem(str(root))
    entry = ShardEntry("../victim/shard-00000.parquet", 4, victim["sha256"])
    with pytest.raises(DatasetSchemaError, match=r"field 'file' = '\.\./victim"):
        load_shard(str(root), fs, path, entry)


@pytest.mark.parametrize("with_manifest", [True, False])
def test_a_link_out_of_the_folder_is_refused(
    tmp_path: Path, victim: dict, with_manifest: bool
) -> None:
    root = tmp_path / "attacker"
    root.mkdir()
    (root / SHARD).symlink_to(tmp_path / "victim" / SHARD)  # absolute target
    if with_manifest:
        write_manifest(root, [victim])
    with pytest.raises(DatasetSchemaError) as err:
        load_dataset(str(root))
    assert_one_line(err, f"{root}/{SHARD}", "<file>")
    assert "link leading out" in str(err.value)
    # A relative link is refused alike.
    (root / SHARD).unlink()
    (root / SHARD).symlink_to(Path("..") / "victim" / SHARD)
    with pytest.raises(DatasetSchemaError, match="link leading out"):
        load_dataset(str(root))
    (root / SHARD).unlink()
    (root / SHARD).symlink_to("/nonexistent/shard.parquet")
    # A dangling link: the manifest names it (refused); a folder listing does not see it.
    with pytest.raises(DatasetSchemaError if with_manifest else FileNotFoundError) as err:
        load_dataset(str(root))
    assert not with_manifest or "link leading out" in str(err.value)


def test_a_manifest_linked_from_outside_is_refused(tmp_path: Path, victim: dict) -> None:
    elsewhere = write_manifest(tmp_path / "elsewhere", [victim])
    root = tmp_path / "attacker"
    write_shard(root)
    (root / MANIFEST_NAME).symlink_to(elsewhere / MANIFEST_NAME)
    with pytest.raises(DatasetSchemaError, match="link leading out"):
        load_dataset(str(root))


def test_links_inside_the_folder_and_a_linked_folder_still_load(tmp_path: Path) -> None:
    real = tmp_path / "real"
    entry = write_shard(real)
    write_manifest(real, [entry, entry | {"file": shard_name(1)}])
    (real / shard_name(1)).symlink_to(SHARD)  # a shard linked to its neighbour
    linked = tmp_path / "linked"
    linked.symlink_to(real, target_is_directory=True)  # the whole set reached through a link
    for root in (str(real), str(linked), f"file://{linked}"):
        assert load_dataset(root).batch_size == 8
    fs = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())
    assert load_dataset("linked", filesystem=fs).batch_size == 8
    (real / shard_name(1)).unlink()
    (real / shard_name(1)).symlink_to(tmp_path / "real" / ".." / "real" / SHARD)
    assert load_dataset("linked", filesystem=fs).batch_size == 8


DEEP = "[" * 100_000 + "]" * 100_000


def assert_manifest_refused(root: Path, field: str, value: object) -> None:
    for read in every_reader(root):
        with pytest.raises(DatasetSchemaError) as err:
            read()
        assert_one_line(err, f"{root}/{MANIFEST_NAME}", field)
        assert err.value.value == value


@pytest.mark.parametrize(
    ("manifest", "field", "value"),
    [
        (b"\xff\xfe garbage", "<file>", None),
        (b'{"schema_version": 1, "shards": [{"file": "sh', "<file>", None),
        (json.dumps({"schema_version": 1, "shards": []}).encode("utf-16"), "<file>", None),
        (DEEP.encode(), "<file>", None),
        ([], "<top level>", "<a JSON array>"),
        ({"shards": []}, "schema_version", None),
        ({"schema_version": True, "shards": []}, "schema_version", True),
        ({"schema_version": "1", "shards": []}, "schema_version", "1"),
        ({"schema_version": 1}, "shards", None),
        ({"schema_version": 1, "shards": "x"}, "shards", "x"),
        ({"schema_version": 1, "shards": {"file": SHARD}}, "shards", "<a JSON object>"),
        ({"schema_version": 1, "shards": [5]}, "shards[0]", 5),
        ({"schema_version": 1, "shards": []}, "shards", "[]"),  # no instances to read
    ],
)
def test_a_malformed_manifest_is_one_error_naming_the_field(
    tmp_path: Path, manifest: bytes | dict | list, field: str, value: object
) -> None:
    root = tmp_path / "set"
    write_shard(root)
    text = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    (root / MANIFEST_NAME).write_bytes(text)
    assert_manifest_refused(root, field, value)


MISSING = object()


@pytest.mark.parametrize(
    ("key", "bad", "shown"),
    [
        ("rows", MISSING, None),
        ("rows", "many", "many"),
        ("rows", True, True),
        ("rows", 4.0, 4.0),
        ("rows", -1, -1),
        ("rows", 0, 0),  # a shard of no instances: numpy's reshape error, naming nothing
        ("rows", 10**12, 10**12),
        ("sha256", MISSING, None),
        ("sha256", "ABC", "ABC"),
        ("sha256", "0" * 5000, "0" * 100 + "..."),
        ("file", MISSING, None),
    ],
)
def test_a_bad_shard_field_is_one_error_naming_it(
    tmp_path: Path, key: str, bad: object, shown: object
) -> None:
    root = tmp_path / "set"
    good = write_shard(root)
    entry = {k: v for k, v in (good | {key: bad}).items() if v is not MISSING}
    write_manifest(root, [good, entry])
    assert_manifest_refused(root, f"shards[1].{key}", shown)


def test_a_good_manifest_still_loads(tmp_path: Path) -> None:
    root = tmp_path / "set"
    entry = write_shard(root)
    write_manifest(root, [entry], counts={"shards": 1}, generator={"task": "cvrp"})
    assert isinstance(load_dataset(str(root)), Instance)
    assert list_shards(str(root)) == [SHARD]
    assert read_manifest(str(root))["counts"] == {"shards": 1}
    os.remove(root / MANIFEST_NAME)  # the folder listing, no manifest
    assert load_dataset(str(root)).batch_size == 4


def test_a_fifo_in_a_data_set_is_refused_at_once(tmp_path: Path) -> None:
    # A named pipe blocks whoever opens it for reading until a writer comes: each read runs in
    # a process of its own with a deadline, so a regression fails here instead of hanging.
    sets = {name: tmp_path / name for name in ("listed", "manifest", "linked", "plain", "fifo")}
    entry = write_shard(sets["listed"])
    write_manifest(sets["listed"], [entry | {"file": shard_name(1)}])
    os.mkfifo(sets["listed"] / shard_name(1))
    write_shard(sets["manifest"])
    os.mkfifo(sets["manifest"] / MANIFEST_NAME)
    sets["linked"].mkdir()
    os.mkfifo(sets["linked"] / ".pipe")
    (sets["linked"] / SHARD).symlink_to(".pipe")  # a link inside the folder, to a FIFO
    sets["plain"].mkdir()
    os.mkfifo(sets["plain"] / SHARD)  # no manifest: the listing reads each shard's footer
    os.mkfifo(sets["fifo"])  # read_shard given a FIFO itself
    reads = [
        ("load_dataset", sets["listed"]),
        ("read_manifest", sets["manifest"]),
        ("load_dataset", sets["manifest"]),
        ("load_dataset", sets["linked"]),
        ("load_dataset", sets["plain"]),
        ("read_shard", sets["fifo"]),
    ]
    refusals = refusals_in_fresh_process(
        f"from linc_core.instances.datasets import {READERS}\n{DATASET_SCHEMA_ERROR}",
        [f"{read}({str(root)!r})" for read, root in reads],
        "DatasetSchemaError",
    )
    named = [
        sets["listed"] / shard_name(1),
        sets["manifest"] / MANIFEST_NAME,
        sets["manifest"] / MANIFEST_NAME,
        sets["linked"] / SHARD,
        sets["plain"] / SHARD,
        sets["fifo"],
    ]
    assert [message for _, message in refusals] == [
        f"{path}: field '<file>' = 'a named pipe (FIFO)': expected a regular file" for path in named
    ]
    assert all(seconds < 1.0 for seconds, _ in refusals), refusals


@pytest.mark.parametrize("kind", ["folder", "socket"])
def test_a_folder_or_socket_named_like_a_shard_is_refused(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "set"
    entry = write_shard(root)
    write_manifest(root, [entry, entry | {"file": shard_name(1)}])
    if kind == "folder":
        (root / shard_name(1)).mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(root / shard_name(1)))
    with pytest.raises(DatasetSchemaError) as err:
        load_dataset(str(root))
    assert_one_line(err, f"{root}/{shard_name(1)}", "<file>")
    assert err.value.value == f"a {kind}"
    if kind == "socket":
        sock.close()


def test_a_link_swapped_in_after_the_folder_check_is_refused(tmp_path: Path) -> None:
    # The folder check resolves a member's links, then opens the file they lead to; were that
    # file replaced by a link in between (to a secret outside), the open must refuse it.
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    swapped = tmp_path / "set" / SHARD
    swapped.parent.mkdir()
    swapped.symlink_to(secret)
    fs = pafs.LocalFileSystem()
    member = "set/shard-00000.parquet"
    for read in (  # a member read whole, and opened for its footer
        lambda: _read_capped(member, fs, str(swapped), str(swapped), 100, follow_links=False),
        lambda: _open_local(member, str(swapped), follow_links=False, max_bytes=100),
    ):
        with pytest.raises(DatasetSchemaError) as err:
            read()
        assert "a link swapped in" in str(err.value) and "hunter2" not in str(err.value)
    # read_shard, given a path of the caller's own, follows its links.
    assert _read_capped("a shard", fs, str(swapped), str(swapped), 100, follow_links=True) == (
        b"hunter2"
    )
