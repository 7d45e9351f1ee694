"""The Solomon reader on real files (Solomon 100, a Homberger-sized file, folders), and
Solomon files with one defect each, derived from real files by editing their text."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from linc_core.instances import Instance, InstanceError, read_solomon, read_solomon_folder
from tests.instance_helpers import assert_names, edit_solomon_row, solomon_text, write_file


def test_read_solomon_c101_values(data_dir: Path) -> None:
    instance = read_solomon(data_dir / "solomon100" / "C101.txt")
    assert instance.problem == "cvrptw" and instance.names == ("C101",)
    assert instance.locs.shape == (1, 101, 2) and instance.locs.dtype == torch.float64
    assert instance.locs[0, 0].tolist() == [40.0, 50.0]
    assert instance.time_windows[0, 0].tolist() == [0.0, 1236.0]
    assert instance.capacity.tolist() == [200.0]
    assert instance.service_time[0, 0].item() == 0.0
    assert torch.all(instance.service_time[0, 1:] == 90.0)
    # Customer 1 row of the file: "1  45  68  10  912  967  90".
    assert instance.locs[0, 1].tolist() == [45.0, 68.0]
    assert instance.demand[0, 1].item() == 10.0
    assert instance.time_windows[0, 1].tolist() == [912.0, 967.0]
    assert instance.demand[0, 0].item() == 0.0
    assert instance.demand[0].sum().item() == 1810.0
    assert instance.travel_time_scale.tolist() == [1.0]
    assert instance.grid_size.tolist() == [100.0]


def test_every_solomon_file_loads_with_grid_100(data_dir: Path) -> None:
    instances, errors = read_solomon_folder(data_dir / "solomon100")
    assert errors == []
    assert len(instances) == 56
    assert {inst.grid_size.item() for inst in instances} == {100.0}
    assert all(inst.num_nodes == 101 for inst in instances)
    batch = Instance.concat(instances)  # same size, so they stack into one batch
    assert batch.batch_size == 56 and batch.names[0] == "C101"


def test_homberger_sized_file_gets_grid_140(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "HG_LIKE",
            "",
            "VEHICLE",
            "NUMBER     CAPACITY",
            "  50          200",
            "",
            "CUSTOMER",
            "CUST NO.  XCOORD.   YCOORD.    DEMAND   READY TIME  DUE DATE   SERVICE   TIME",
            "",
            "    0      70         70          0          0       1351          0",
            "    1     131         12         10          0       1200         10",
            "    2      12        138         20          0       1200         10",
        ]
    )
    instance = read_solomon(write_file(tmp_path, "HG_LIKE.txt", text))
    assert instance.grid_size.tolist() == [140.0]
    assert instance.num_customers == 2


def test_read_solomon_folder_reports_bad_file_and_loads_the_rest(
    data_dir: Path, tmp_path: Path
) -> None:
    for name in ("C101", "R101", "RC201"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", tmp_path / f"{name}.txt")
    shutil.copy(data_dir / "solomon100" / "C101.sol", tmp_path / "C101.sol")  # not a .txt
    broken = solomon_text(data_dir, "R102")[:1500]  # cut mid-row
    write_file(tmp_path, "BROKEN.txt", broken)
    instances, errors = read_solomon_folder(tmp_path)
    assert [inst.names[0] for inst in instances] == ["C101", "R101", "RC201"]
    assert len(errors) == 1
    path, error = errors[0]
    assert path.name == "BROKEN.txt"
    assert isinstance(error, InstanceError) and "BROKEN.txt" in str(error)


def test_read_solomon_folder_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        read_solomon_folder(tmp_path / "nope")


def test_malformed_solomon_value(data_dir: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path, "BAD.txt", edit_solomon_row(solomon_text(data_dir), 5, 3, "ten"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "CUSTOMER row 5 DEMAND", "ten")


def test_truncated_solomon_file(data_dir: Path, tmp_path: Path) -> None:
    text = solomon_text(data_dir)
    cut = text.index("   57      40         15")  # keep "   57      40" only
    path = write_file(tmp_path, "CUT.txt", text[: cut + len("   57      40")])
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "CUSTOMER row 57", "57 ...")  # a line quoted by its first word


def test_a_number_past_int64_is_an_instance_error_not_a_traceback(
    data_dir: Path, tmp_path: Path
) -> None:
    """vrplib's numpy parse raised OverflowError for a coordinate of 21 digits, which escaped
    ``linc-data download`` and ``linc-solve`` as a traceback."""
    text = edit_solomon_row(solomon_text(data_dir), 1, 1, "999999999999999999999")
    path = write_file(tmp_path, "BIG.txt", text)
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert str(err.value) == (
        f"{path}: field 'format' = 'Python int too large to convert to C long': vrplib could "
        "not parse this Solomon file"
    )
