"""TSPLIB/CVRPLIB instance, solution and tour readers on real files, and files with one
defect each, derived from real files by editing their text."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from linc_core.instances import (
    InstanceError,
    read_cvrplib,
    read_solomon,
    read_solution,
    read_tsp_tour,
    read_tsplib,
)
from tests.instance_helpers import assert_names, solomon_text, write_file


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


def test_malformed_vrplib_file(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    path = write_file(tmp_path, "X-bad.vrp", text.replace("CAPACITY : \t206", "CAPACITY 206"))
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert "X-bad.vrp" in str(err.value) and err.value.field == "format"
    coords = text.replace("\n3\t792\t5", "\n3\t792\tfive")
    path = write_file(tmp_path, "X-word.vrp", coords)
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "NODE_COORD_SECTION", "five")


def test_truncated_vrplib_file(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    lines = text.splitlines()
    demand_start = lines.index(next(line for line in lines if "DEMAND_SECTION" in line))
    path = write_file(tmp_path, "X-cut.vrp", "\n".join(lines[: demand_start + 51]) + "\n")
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "DEMAND_SECTION", (50,))


def test_missing_section(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "DEMAND_SECTION" in line)
    end = next(i for i, line in enumerate(lines) if "DEPOT_SECTION" in line)
    path = write_file(tmp_path, "X-nodemand.vrp", "\n".join(lines[:start] + lines[end:]) + "\n")
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "DEMAND_SECTION", None)
    solomon = solomon_text(data_dir).replace("CUSTOMER\n", "")
    path = write_file(tmp_path, "NOCUST.txt", solomon)
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert "NOCUST.txt" in str(err.value) and err.value.field == "CUSTOMER section"


def test_non_euclidean_tsplib_rejected(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "tsplib" / "berlin52.tsp").read_text().replace("EUC_2D", "GEO")
    path = write_file(tmp_path, "geo52.tsp", text)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert_names(err, path, "EDGE_WEIGHT_TYPE", "GEO")


def test_bad_tour_files(data_dir: Path, tmp_path: Path) -> None:
    text = (data_dir / "tsplib" / "berlin52.opt.tour").read_text()
    path = write_file(tmp_path, "short.tour", text.replace("\n49\n", "\n"))
    with pytest.raises(InstanceError) as err:
        read_tsp_tour(path)
    assert_names(err, path, "TOUR_SECTION", 51)
    path = write_file(tmp_path, "none.tour", text.replace("TOUR_SECTION", "TOUR"))
    with pytest.raises(InstanceError, match="none.tour"):
        read_tsp_tour(path)


def test_solution_without_routes(tmp_path: Path) -> None:
    path = write_file(tmp_path, "empty.sol", "Cost 12\n")
    with pytest.raises(InstanceError, match="empty.sol"):
        read_solution(path)


@pytest.mark.parametrize("token", ["x", "-3", "2.5", "1e3"])
def test_a_route_s_bad_customer_is_named_by_its_line_and_token(tmp_path: Path, token) -> None:
    path = write_file(tmp_path, "bad.sol", f"Route #1: 1 2 3\nRoute #4: 5 {token}\nCost 9\n")
    with pytest.raises(InstanceError) as err:
        read_solution(path)
    assert str(err.value) == f"{path}: field 'line 2 (Route #4)' = {token!r}: not a customer number"


# Spellings Python's float() reads as non-finite, and numbers beyond float64 (read as inf).
NON_FINITE_TOKENS = ["inf", "-inf", "+INF", "Infinity", "nan", "-NaN", "1e400", "-1E+999"]


@pytest.mark.parametrize("token", NON_FINITE_TOKENS)
def test_non_finite_tsplib_coordinate_is_named_before_any_arithmetic(
    data_dir: Path, tmp_path: Path, token: str
) -> None:
    """Before: OverflowError (inf, 1e400) or "cannot convert float NaN to integer" from the
    grid size, naming neither file nor field."""
    text = (data_dir / "tsplib" / "berlin52.tsp").read_text()
    edited = text.replace("\n3 345.0 750.0\n", f"\n3 345.0 {token}\n")
    path = write_file(tmp_path, "berlin-bad.tsp", edited)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert_names(err, path, "NODE_COORD_SECTION node 3 y", token)
    assert "not a finite number" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("token", NON_FINITE_TOKENS)
def test_non_finite_cvrplib_number_is_named_in_every_section(
    data_dir: Path, tmp_path: Path, token: str
) -> None:
    text = (data_dir / "cvrplib_x" / "X-n101-k25.vrp").read_text()  # CRLF line ends
    path = write_file(tmp_path, "X-x.vrp", text.replace("\n3\t792\t5", f"\n3\t{token}\t5"))
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "NODE_COORD_SECTION node 3 x", token)
    path = write_file(tmp_path, "X-demand.vrp", text.replace("\n2\t38\t", f"\n2\t{token}\t"))
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "DEMAND_SECTION node 2", token)
    edited = text.replace("CAPACITY : \t206", f"CAPACITY : {token}")
    path = write_file(tmp_path, "X-cap.vrp", edited)
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert_names(err, path, "CAPACITY", token)


def test_non_finite_coordinate_named_by_position_when_the_text_differs(tmp_path: Path) -> None:
    """Node ids out of order and a first-row non-finite value: the file's id and token."""
    text = "NAME: t\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EUC_2D\nNODE_COORD_SECTION\n"
    path = write_file(tmp_path, "t.tsp", text + "7 nan 1\n2 1 1\n3 2 2\nEOF\n")
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert_names(err, path, "NODE_COORD_SECTION node 7 x", "nan")


def test_finite_but_huge_coordinate_is_refused_by_validation(tmp_path: Path) -> None:
    text = "NAME: t\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EUC_2D\nNODE_COORD_SECTION\n"
    path = write_file(tmp_path, "t.tsp", text + "1 0 0\n2 1e300 1\n3 2 2\nEOF\n")
    with pytest.raises(InstanceError, match=r"t\.tsp: field 'locs\[1\]'"):
        read_tsplib(path)


def test_grid_size_refuses_non_finite_coordinates_by_name() -> None:
    from linc_core.instances.reading import grid_size

    assert grid_size(np.array([[0.0, 3.5]]), ()) == 4.0
    for value in (math.inf, math.nan):
        with pytest.raises(ValueError, match="not a finite number"):
            grid_size(np.array([[0.0, value]]), (1000.0,))
