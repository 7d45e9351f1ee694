"""Benchmark readers on real files, and one test per class of bad input (derived from real
files by editing their text)."""

from __future__ import annotations

import csv
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from linc_core.instances import (
    Instance,
    InstanceError,
    read_cvrplib,
    read_solomon,
    read_solomon_folder,
    read_solution,
    read_tsp_tour,
    read_tsplib,
    validate_instance,
)


# ---------------------------------------------------------------------- helpers
def _solomon_text(data_dir: Path, name: str = "C101") -> str:
    return (data_dir / "solomon100" / f"{name}.txt").read_text()


def _edit_solomon_row(text: str, customer: int, column: int, value: str) -> str:
    """Replace one value of a customer row (columns: no, x, y, demand, ready, due, service)."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "CUST NO." in line)
    for i in range(header + 1, len(lines)):
        tokens = lines[i].split()
        if tokens and tokens[0] == str(customer):
            tokens[column] = value
            lines[i] = "  ".join(tokens)
            return "\n".join(lines) + "\n"
    raise AssertionError(f"customer {customer} not found")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _assert_names(err: pytest.ExceptionInfo[InstanceError], path: Path, field: str, value: object):
    message = str(err.value)
    assert path.name in message
    assert f"'{field}'" in message and err.value.field == field
    assert repr(value) in message and err.value.value == value


# ---------------------------------------------------------------------- Solomon
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
    instance = read_solomon(_write(tmp_path, "HG_LIKE.txt", text))
    assert instance.grid_size.tolist() == [140.0]
    assert instance.num_customers == 2


def test_read_solomon_folder_reports_bad_file_and_loads_the_rest(
    data_dir: Path, tmp_path: Path
) -> None:
    for name in ("C101", "R101", "RC201"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", tmp_path / f"{name}.txt")
    shutil.copy(data_dir / "solomon100" / "C101.sol", tmp_path / "C101.sol")  # not a .txt
    broken = _solomon_text(data_dir, "R102")[:1500]  # cut mid-row
    _write(tmp_path, "BROKEN.txt", broken)
    instances, errors = read_solomon_folder(tmp_path)
    assert [inst.names[0] for inst in instances] == ["C101", "R101", "RC201"]
    assert len(errors) == 1
    path, error = errors[0]
    assert path.name == "BROKEN.txt"
    assert isinstance(error, InstanceError) and "BROKEN.txt" in str(error)


def test_read_solomon_folder_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        read_solomon_folder(tmp_path / "nope")


# ---------------------------------------------------------------------- TSPLIB / CVRPLIB
def test_read_tsplib_berlin52(data_dir: Path) -> None:
    instance = read_tsplib(data_dir / "tsplib" / "berlin52.tsp")
    assert instance.problem == "tsp" and instance.names == ("berlin52",)
    assert instance.locs.shape == (1, 52, 2)
    assert instance.locs[0, 0].tolist() == [565.0, 575.0]
    assert instance.locs[0, 51].tolist() == [1740.0, 245.0]
    assert instance.grid_size.tolist() == [1740.0]
    assert math.isinf(instance.capacity.item())
    assert torch.all(instance.demand == 0)


def test_read_tsplib_keeps_non_integer_coordinates_exact(data_dir: Path) -> None:
    # ch130's first city is "1 334.5909245845 161.7809319139" in the file; float32 would
    # round it to 334.59091... .
    instance = read_tsplib(data_dir / "tsplib" / "ch130.tsp")
    first = (data_dir / "tsplib" / "ch130.tsp").read_text().split("NODE_COORD_SECTION")[1]
    x, y = (float(t) for t in first.split()[1:3])
    assert instance.locs[0, 0].tolist() == [x, y]


def test_every_tsplib_file_loads(data_dir: Path) -> None:
    with (data_dir / "tsplib" / "bks.csv").open(newline="") as handle:
        dims = {row["instance"]: int(row["dimension"]) for row in csv.DictReader(handle)}
    for name, dimension in dims.items():
        assert read_tsplib(data_dir / "tsplib" / f"{name}.tsp").num_nodes == dimension


def test_read_cvrplib_x_instance(data_dir: Path) -> None:
    instance = read_cvrplib(data_dir / "cvrplib_x" / "X-n101-k25.vrp")
    assert instance.problem == "cvrp" and instance.names == ("X-n101-k25",)
    assert instance.locs.shape == (1, 101, 2)
    assert instance.locs[0, 0].tolist() == [365.0, 689.0]  # node 1 of the file is the depot
    assert instance.locs[0, 1].tolist() == [146.0, 180.0]
    assert instance.capacity.tolist() == [206.0]
    assert instance.demand[0, :3].tolist() == [0.0, 38.0, 51.0]
    assert instance.grid_size.tolist() == [1000.0]
    assert torch.all(instance.time_windows[0, :, 0] == 0)
    assert torch.all(torch.isinf(instance.time_windows[0, :, 1]))
    assert torch.all(instance.service_time == 0)


def test_read_cvrplib_largest_x_instance(data_dir: Path) -> None:
    instance = read_cvrplib(data_dir / "cvrplib_x" / "X-n1001-k43.vrp")
    assert instance.num_nodes == 1001 and instance.num_customers == 1000


def test_read_xml100_matches_metadata(data_dir: Path) -> None:
    with (data_dir / "xml100" / "xml100_metadata.csv").open(newline="") as handle:
        rows = {row["Instance"]: row for row in csv.DictReader(handle)}
    for name in ("XML100_1111_01", "XML100_2236_18", "XML100_3376_25"):
        instance = read_cvrplib(data_dir / "xml100" / f"{name}.vrp")
        assert instance.num_nodes == 101 and instance.names == (name,)
        assert instance.capacity.item() == float(rows[name]["Q"])
        assert instance.demand[0].sum().item() == float(rows[name]["d(V)"])
    first = read_cvrplib(data_dir / "xml100" / "XML100_1111_01.vrp")
    assert first.locs[0, 0].tolist() == [764.0, 255.0]
    assert first.locs[0, 1].tolist() == [303.0, 588.0]
    assert first.capacity.tolist() == [4.0]


def test_read_solution_and_tour(data_dir: Path) -> None:
    routes = read_solution(data_dir / "solomon100" / "C101.sol")
    assert len(routes) == 10
    assert routes[0] == [5, 3, 7, 8, 10, 11, 9, 6, 4, 2, 1, 75]
    assert sorted(c for r in routes for c in r) == list(range(1, 101))
    tour = read_tsp_tour(data_dir / "tsplib" / "berlin52.opt.tour")
    assert len(tour) == 52 and sorted(tour) == list(range(52))
    assert tour[:4] == [0, 48, 31, 44]  # file: 1 49 32 45


# ---------------------------------------------------------------------- bad input
def test_malformed_solomon_value(data_dir: Path, tmp_path: Path) -> None:
    path = _write(tmp_path, "BAD.txt", _edit_solomon_row(_solomon_text(data_dir), 5, 3, "ten"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "CUSTOMER row 5 DEMAND", "ten")


def test_malformed_vrplib_file(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    path = _write(tmp_path, "X-bad.vrp", text.replace("CAPACITY : \t206", "CAPACITY 206"))
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert "X-bad.vrp" in str(err.value) and err.value.field == "format"
    coords = text.replace("\n3\t792\t5", "\n3\t792\tfive")
    path = _write(tmp_path, "X-word.vrp", coords)
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    _assert_names(err, path, "NODE_COORD_SECTION", "five")


def test_truncated_solomon_file(data_dir: Path, tmp_path: Path) -> None:
    text = _solomon_text(data_dir)
    cut = text.index("   57      40         15")  # keep "   57      40" only
    path = _write(tmp_path, "CUT.txt", text[: cut + len("   57      40")])
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "CUSTOMER row 57", "57      40")


def test_truncated_vrplib_file(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    lines = text.splitlines()
    demand_start = lines.index(next(line for line in lines if "DEMAND_SECTION" in line))
    path = _write(tmp_path, "X-cut.vrp", "\n".join(lines[: demand_start + 51]) + "\n")
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    _assert_names(err, path, "DEMAND_SECTION", (50,))


def test_missing_section(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "DEMAND_SECTION" in line)
    end = next(i for i, line in enumerate(lines) if "DEPOT_SECTION" in line)
    path = _write(tmp_path, "X-nodemand.vrp", "\n".join(lines[:start] + lines[end:]) + "\n")
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    _assert_names(err, path, "DEMAND_SECTION", None)
    solomon = _solomon_text(data_dir).replace("CUSTOMER\n", "")
    path = _write(tmp_path, "NOCUST.txt", solomon)
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert "NOCUST.txt" in str(err.value) and err.value.field == "CUSTOMER section"


def test_negative_demand(data_dir: Path, tmp_path: Path) -> None:
    path = _write(tmp_path, "NEG.txt", _edit_solomon_row(_solomon_text(data_dir), 5, 3, "-10"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "demand[5]", -10)


def test_ready_after_due(data_dir: Path, tmp_path: Path) -> None:
    path = _write(tmp_path, "TW.txt", _edit_solomon_row(_solomon_text(data_dir), 3, 4, "200"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "time_windows[3]", [200, 146])


def test_demand_above_capacity(data_dir: Path, tmp_path: Path) -> None:
    path = _write(tmp_path, "BIG.txt", _edit_solomon_row(_solomon_text(data_dir), 5, 3, "250"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "demand[5]", 250)
    assert "capacity 200" in str(err.value)


def test_customer_unservable_alone_by_due(data_dir: Path, tmp_path: Path) -> None:
    # Customer 1 sits at (45, 68), 18.68 from the depot (40, 50): a due of 18 is unreachable.
    text = _edit_solomon_row(_solomon_text(data_dir), 1, 4, "0")
    path = _write(tmp_path, "EARLY.txt", _edit_solomon_row(text, 1, 5, "18"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "time_windows[1]", [0, 18])
    assert "arrival 18.6815" in str(err.value)


def test_customer_unservable_alone_by_depot_due(data_dir: Path, tmp_path: Path) -> None:
    # Ready 1130 + service 90 + 18.68 back = 1238.68 > depot due 1236.
    text = _edit_solomon_row(_solomon_text(data_dir), 1, 4, "1130")
    path = _write(tmp_path, "LATE.txt", _edit_solomon_row(text, 1, 5, "1200"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    _assert_names(err, path, "time_windows[1]", [1130, 1200])
    assert "1236" in str(err.value)
    # One time unit earlier it fits: 1127 + 90 + 18.68 = 1235.68 <= 1236.
    text = _edit_solomon_row(_solomon_text(data_dir), 1, 4, "1127")
    assert read_solomon(_write(tmp_path, "FITS.txt", _edit_solomon_row(text, 1, 5, "1200")))


def test_non_euclidean_tsplib_rejected(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "tsplib" / "berlin52.tsp").read_text().replace("EUC_2D", "GEO")
    path = _write(tmp_path, "geo52.tsp", text)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    _assert_names(err, path, "EDGE_WEIGHT_TYPE", "GEO")


def test_bad_tour_files(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "tsplib" / "berlin52.opt.tour").read_text()
    path = _write(tmp_path, "short.tour", text.replace("\n49\n", "\n"))
    with pytest.raises(InstanceError) as err:
        read_tsp_tour(path)
    _assert_names(err, path, "TOUR_SECTION", 51)
    path = _write(tmp_path, "none.tour", text.replace("TOUR_SECTION", "TOUR"))
    with pytest.raises(InstanceError, match="none.tour"):
        read_tsp_tour(path)


def test_solution_without_routes(tmp_path: Path) -> None:
    path = _write(tmp_path, "empty.sol", "Cost 12\n")
    with pytest.raises(InstanceError, match="empty.sol"):
        read_solution(path)


def test_validate_instance_names_the_batch_row() -> None:
    locs = np.zeros((2, 3, 2))
    locs[:, 1] = [1.0, 0.0]
    locs[:, 2] = [0.0, 1.0]
    batch = Instance.from_arrays(
        "cvrp", locs, demand=[[0, 1, 1], [0, 1, 5]], capacity=4, names=["ok", "heavy"]
    )
    with pytest.raises(InstanceError) as err:
        validate_instance(batch, "generated")
    assert err.value.field == "demand[2]" and err.value.value == 5
    assert "row 1: heavy" in str(err.value)
