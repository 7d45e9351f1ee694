"""A data set folder read back: its manifest is checked field by field, and no shard name or
link in it reaches a file outside the folder (real files, real links)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from faults.servers import S3Server
from linc_core.instances import Instance, datasets
from linc_core.instances.datasets import (
    MANIFEST_NAME,
    ShardEntry,
    _open_local,  # the open of a local shard's footer
    _read_capped,  # the read of every manifest and shard
    list_shards,
    load_dataset,
    load_shard,
    read_manifest,
    read_shard,
    resolve_filesystem,
    shard_entries,
    shard_name,
)
from linc_core.instances.parquet import (
    SCHEMA_VERSION,
    DatasetSchemaError,
    instance_to_table,
    parquet_bytes,
    sha256_hex,
)
from linc_core.problems import generate_cvrp
from linc_core.utils.files import size_in_words
from tests.conftest import refusals_in_fresh_process

SHARD = shard_name(0)
# What a test run in a fresh process imports to read a data set and catch its refusals.
READERS = "list_shards, load_dataset, read_manifest, read_shard"
DATASET_SCHEMA_ERROR = "from linc_core.instances.parquet import DatasetSchemaError"


def write_shard(folder: Path, seed: int = 0) -> dict:
    """One real shard in ``folder``; returns its manifest entry."""
    folder.mkdir(parents=True, exist_ok=True)
    data = parquet_bytes(instance_to_table(generate_cvrp(4, 10, seed)))
    (folder / SHARD).write_bytes(data.to_pybytes())
    return {"file": SHARD, "rows": 4, "sha256": sha256_hex(data)}


def write_manifest(folder: Path, entries: list, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {"schema_version": SCHEMA_VERSION, "shards": entries} | extra
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    return folder


def every_reader(root: Path) -> list:
    """The ways a data set is opened: each call reads the manifest or a shard."""
    fs, path = resolve_filesystem(str(root))
    return [
        lambda: load_dataset(str(root)),
        lambda: list_shards(str(root)),
        lambda: read_manifest(str(root)),
        lambda: shard_entries(str(root), fs, path),
    ]


def assert_one_line(err: pytest.ExceptionInfo, source: str, field: str) -> str:
    message = str(err.value)
    assert message.startswith(f"{source}: field '{field}' = "), message
    assert "\n" not in message and err.value.field == field
    return message


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


def sparse_file(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (and reads back as zeros)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.truncate(size)
    return path


def test_a_manifest_or_shard_over_its_cap_is_refused_by_its_size_unread(tmp_path: Path) -> None:
    # Each was read whole before it was parsed: 3 GB of manifest or shard, read into memory
    # (and a manifest decoded again as text). In a fresh process with an 8 GiB address space,
    # so a regression fails (a MemoryError, the deadline) instead of filling this machine.
    huge = 3 * 10**9  # over both caps: 64 MiB for a manifest, 2 GiB for a shard
    sets = {name: tmp_path / name for name in ("manifest", "listed", "plain", "linked")}
    write_shard(sets["manifest"])
    sparse_file(sets["manifest"] / MANIFEST_NAME, huge)
    write_manifest(sets["listed"], [write_shard(sets["listed"]) | {"file": shard_name(1)}])
    sparse_file(sets["listed"] / shard_name(1), huge)
    sparse_file(sets["plain"] / SHARD, huge)  # no manifest: the listing opens its footer
    sparse_file(sets["linked"] / ".big", huge)
    (sets["linked"] / SHARD).symlink_to(".big")  # a link inside the folder, to a huge file
    lone = sparse_file(tmp_path / "lone.parquet", huge)
    (tmp_path / "lone-link.parquet").symlink_to(lone)
    subtree = f"pafs.SubTreeFileSystem({str(tmp_path)!r}, pafs.LocalFileSystem())"
    manifest = sets["manifest"]
    reads = [  # (call, the file it names)
        (f"read_manifest({str(manifest)!r})", manifest / MANIFEST_NAME),
        (f"load_dataset({str(manifest)!r})", manifest / MANIFEST_NAME),
        (f"list_shards({str(manifest)!r})", manifest / MANIFEST_NAME),
        (f"load_dataset('manifest', filesystem={subtree})", f"manifest/{MANIFEST_NAME}"),
        (f"load_dataset('file://{manifest}?key=hunter2')", f"file://{manifest}/{MANIFEST_NAME}"),
        (f"load_dataset({str(sets['listed'])!r})", sets["listed"] / shard_name(1)),
        (f"load_dataset({str(sets['plain'])!r})", sets["plain"] / SHARD),
        (f"load_dataset({str(sets['linked'])!r})", sets["linked"] / SHARD),
        (f"read_shard({str(lone)!r})", lone),
        (f"read_shard({str(tmp_path / 'lone-link.parquet')!r})", tmp_path / "lone-link.parquet"),
    ]
    refusals = refusals_in_fresh_process(
        f"import pyarrow.fs as pafs\nfrom linc_core.instances.datasets import {READERS}\n"
        f"{DATASET_SCHEMA_ERROR}",
        [call for call, _ in reads],
        "DatasetSchemaError",
    )
    caps = ["64 MiB"] * 5 + ["2 GiB"] * 5
    assert [message for _, message in refusals] == [
        f"{file}: field '<file>' = '2.8 GiB': larger than the {cap} this reader accepts"
        for (_, file), cap in zip(reads, caps, strict=True)
    ], refusals
    assert all(seconds < 1.0 for seconds, _ in refusals), refusals


def test_a_file_at_its_cap_is_read_and_one_byte_more_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The caps are lowered to a real set's own sizes: at the cap it loads, a byte under refuses.
    root = tmp_path / "set"
    write_manifest(root, [write_shard(root)])
    manifest_size = (root / MANIFEST_NAME).stat().st_size
    shard_size = (root / SHARD).stat().st_size
    monkeypatch.setattr(datasets, "MAX_MANIFEST_BYTES", manifest_size)
    monkeypatch.setattr(datasets, "MAX_SHARD_BYTES", shard_size)
    assert load_dataset(str(root)).batch_size == 4
    assert read_shard(str(root / SHARD)).batch_size == 4
    monkeypatch.setattr(datasets, "MAX_SHARD_BYTES", shard_size - 1)
    for read in (lambda: load_dataset(str(root)), lambda: read_shard(str(root / SHARD))):
        with pytest.raises(DatasetSchemaError) as err:
            read()
        assert_one_line(err, f"{root}/{SHARD}", "<file>")
        assert err.value.value == size_in_words(shard_size)
        assert (
            err.value.problem
            == f"larger than the {size_in_words(shard_size - 1)} this reader accepts"
        )
    monkeypatch.setattr(datasets, "MAX_MANIFEST_BYTES", manifest_size - 1)
    with pytest.raises(DatasetSchemaError) as err:
        read_manifest(str(root))
    assert_one_line(err, f"{root}/{MANIFEST_NAME}", "<file>")


def test_an_object_over_its_cap_is_refused_by_its_listed_size(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On an object store a file is refused by the size it lists, before a byte is fetched.
    # Uploading gigabytes would take minutes: the caps are lowered under a real set's sizes.
    local = tmp_path / "set"
    write_manifest(local, [write_shard(local)])
    uri, plain = s3_server.uri("capped"), s3_server.uri("plain")  # plain: no manifest
    fs, path = resolve_filesystem(uri)
    for key, file in ((f"{path}/{MANIFEST_NAME}", MANIFEST_NAME), (f"{path}/{SHARD}", SHARD),
                      (f"{resolve_filesystem(plain)[1]}/{SHARD}", SHARD)):  # fmt: skip
        with fs.open_output_stream(key) as out:
            out.write((local / file).read_bytes())
    shard_uri = f"s3://linc/capped/{SHARD}?{uri.split('?', 1)[1]}"
    assert load_dataset(uri).batch_size == 4 and load_dataset(plain).batch_size == 4
    assert read_shard(shard_uri).batch_size == 4  # at its real cap, a shard reads whole
    shard_size = (local / SHARD).stat().st_size
    monkeypatch.setattr(datasets, "MAX_SHARD_BYTES", shard_size - 1)
    for read, source in (
        (lambda: load_dataset(uri), f"s3://linc/capped/{SHARD}"),
        (lambda: load_dataset(plain), f"s3://linc/plain/{SHARD}"),  # the footer's open
        (lambda: read_shard(shard_uri), f"s3://linc/capped/{SHARD}"),
    ):
        with pytest.raises(DatasetSchemaError) as err:
            read()
        assert_one_line(err, source, "<file>")  # the endpoint in the query stays out
        assert err.value.value == size_in_words(shard_size)
        assert (
            err.value.problem
            == f"larger than the {size_in_words(shard_size - 1)} this reader accepts"
        )
    manifest_size = (local / MANIFEST_NAME).stat().st_size
    monkeypatch.setattr(datasets, "MAX_MANIFEST_BYTES", manifest_size - 1)
    with pytest.raises(DatasetSchemaError) as err:
        read_manifest(uri)
    assert_one_line(err, f"s3://linc/capped/{MANIFEST_NAME}", "<file>")
    assert err.value.value == size_in_words(manifest_size)


def test_an_object_replaced_between_its_listing_and_its_read_is_refused(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listed size decides how much is fetched; an object rewritten on the server right
    after its listing (a real upload, timed by wrapping the listing) is refused: grown past
    the cap, by the bytes read past it; grown under the cap, read in part, by its sha256."""
    local = tmp_path / "set"
    write_manifest(local, [write_shard(local)])
    # the same 4 rows at 30 customers: a larger object under the same name
    replacement = parquet_bytes(instance_to_table(generate_cvrp(4, 30, 1))).to_pybytes()
    uri = s3_server.uri("replaced")
    fs, path = resolve_filesystem(uri)
    shard_key = f"{path}/{SHARD}"

    def upload(files: dict[str, bytes]) -> None:
        for key, data in files.items():
            with fs.open_output_stream(f"{path}/{key}") as out:
                out.write(data)

    upload({name: (local / name).read_bytes() for name in (MANIFEST_NAME, SHARD)})
    listed_then_replaced = datasets._check_remote_size

    def listing_then_upload(source, filesystem, key, max_bytes):
        size = listed_then_replaced(source, filesystem, key, max_bytes)
        if key == shard_key:
            upload({SHARD: replacement})
        return size

    monkeypatch.setattr(datasets, "_check_remote_size", listing_then_upload)
    small, large = (local / SHARD).stat().st_size, len(replacement)
    assert large > small
    monkeypatch.setattr(datasets, "MAX_SHARD_BYTES", small)  # the old object fits, the new not
    with pytest.raises(DatasetSchemaError) as err:
        load_dataset(uri)
    assert_one_line(err, f"s3://linc/replaced/{SHARD}", "<file>")
    assert err.value.value == f"over {size_in_words(small)}"
    upload({SHARD: (local / SHARD).read_bytes()})
    monkeypatch.setattr(datasets, "MAX_SHARD_BYTES", 2 * large)  # both fit: read in part
    with pytest.raises(DatasetSchemaError) as err:
        load_dataset(uri)
    assert_one_line(err, f"s3://linc/replaced/{SHARD}", "sha256")
    assert err.value.problem == "differs from the manifest"
