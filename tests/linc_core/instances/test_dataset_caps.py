"""A data set's manifest and shards are refused by their size before they are read, locally
and on S3 (sparse files, a real S3-compatible server), and a file swapped after its listing is
refused too."""

from __future__ import annotations

from pathlib import Path

import pytest

from faults.servers import S3Server
from linc_core.instances import datasets
from linc_core.instances.datasets import (
    MANIFEST_NAME,
    load_dataset,
    read_manifest,
    read_shard,
    resolve_filesystem,
    shard_name,
)
from linc_core.instances.parquet import (
    DatasetSchemaError,
    instance_to_table,
    parquet_bytes,
)
from linc_core.problems import generate_cvrp
from linc_core.utils.files import size_in_words
from tests.conftest import refusals_in_fresh_process
from tests.linc_core.instances.dataset_files import (
    DATASET_SCHEMA_ERROR,
    READERS,
    SHARD,
    assert_one_line,
    write_manifest,
    write_shard,
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
