"""Texts that made vrplib 2.2.0 spend quadratic time or memory are refused by a linear pre-scan
before vrplib sees them; integers past int64 and lines of a file that is no benchmark at all
are named in one short line."""

from __future__ import annotations

from pathlib import Path

import pytest

import linc_core.instances.reading as reading
from linc_core.instances import InstanceError, read_cvrplib, read_solomon, read_tsplib
from linc_core.instances.any_file import read_instance_text
from linc_core.instances.reading import (
    MAX_READER_NODES,
    MAX_VRPLIB_SECTIONS,
    NOT_FINITE,
    check_vrplib_layout,
)
from tests.instance_helpers import edit_solomon_row, solomon_text, write_file

HEADER = "NAME : t\nTYPE : TSP\nDIMENSION : {}\nEDGE_WEIGHT_TYPE : {}\n"
CVRP = "NAME : t\nTYPE : CVRP\nDIMENSION : 3\nEDGE_WEIGHT_TYPE : EUC_2D\nCAPACITY : 10\n"


def coords(count: int) -> str:
    return "".join(f"{i} {i % 997} {i % 991}\n" for i in range(1, count + 1))


@pytest.fixture
def vrplib_unreached(monkeypatch: pytest.MonkeyPatch) -> None:
    """vrplib's parser fails the test if called: the pre-scan must refuse first."""

    def parse(*_: object, **__: object) -> dict:
        raise AssertionError("vrplib parsed a text the pre-scan should have refused")

    monkeypatch.setattr(reading, "parse_vrplib", parse)


def test_coordinates_past_dimension_before_an_edge_weight_section_are_refused(
    tmp_path: Path, vrplib_unreached: None
) -> None:
    """Unpatched, vrplib computed the 40,000 x 40,000 distance matrix (about 13 GB; 12,000
    lines took 2.4 GB and 18 s) before linc compared the coordinates with DIMENSION 3."""
    text = HEADER.format(3, "EUC_2D") + "NODE_COORD_SECTION\n" + coords(40_000)
    path = write_file(tmp_path, "ew.tsp", text + "EDGE_WEIGHT_SECTION\n")
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert str(err.value) == (
        f"{path}: field 'NODE_COORD_SECTION' = '40000 lines': more than DIMENSION 3 allows"
    )


def test_an_edge_weight_section_needs_explicit_weights(
    tmp_path: Path, vrplib_unreached: None
) -> None:
    text = HEADER.format(5000, "EUC_2D") + "NODE_COORD_SECTION\n" + coords(5000)
    path = write_file(tmp_path, "ew.tsp", text + "EDGE_WEIGHT_SECTION\nEOF\n")
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert str(err.value) == (
        f"{path}: field 'EDGE_WEIGHT_TYPE' = 'EUC_2D': an EDGE_WEIGHT_SECTION is read only "
        "with EDGE_WEIGHT_TYPE EXPLICIT"
    )
    explicit = HEADER.format(3, "EXPLICIT") + "EDGE_WEIGHT_FORMAT : FULL_MATRIX\n"
    path = write_file(tmp_path, "full.tsp", explicit + "EDGE_WEIGHT_SECTION\n" + "0 1\n" * 5)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert str(err.value) == (
        f"{path}: field 'EDGE_WEIGHT_SECTION' = '10 values': more than DIMENSION 3 x 3"
    )


def test_explicit_weights_within_dimension_reach_the_reader_s_own_check(tmp_path: Path) -> None:
    explicit = HEADER.format(3, "EXPLICIT") + "EDGE_WEIGHT_FORMAT : FULL_MATRIX\n"
    path = write_file(tmp_path, "full.tsp", explicit + "EDGE_WEIGHT_SECTION\n" + "0 1 2\n" * 3)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert str(err.value) == (
        f"{path}: field 'EDGE_WEIGHT_TYPE' = 'EXPLICIT': only EUC_2D is supported"
    )


def test_many_section_lines_are_refused_at_the_first_past_the_bound(
    vrplib_unreached: None,
) -> None:
    """vrplib copied the rest of the lines once per section: 60,000 such lines took 15 s, and
    these 300,000 would take minutes, freezing the served model that reads request texts."""
    text = HEADER.format(3, "EUC_2D") + "".join(f"S{i}_SECTION\n" for i in range(300_000))
    with pytest.raises(InstanceError) as err:
        read_instance_text(text, "bomb")
    assert err.value.field == "sections" and "\n" not in str(err.value)
    assert str(err.value).endswith(
        f"bomb.tsp: field 'sections' = 'S{MAX_VRPLIB_SECTIONS}_SECTION': section "
        f"{MAX_VRPLIB_SECTIONS + 1}: a VRPLIB file holds at most {MAX_VRPLIB_SECTIONS}"
    )


def test_the_pre_scan_reads_lines_as_vrplib_does() -> None:
    head = HEADER.format(3, "EUC_2D")
    check_vrplib_layout(head + "A_SECTION\n" * MAX_VRPLIB_SECTIONS, "ok")
    # comment lines, blank lines and everything after EOF are not vrplib's sections or rows
    ignored = "# B_SECTION\n\n" * 50 + "EOF\n" + "C_SECTION\n" * 50
    check_vrplib_layout(head + "NODE_COORD_SECTION\n" + coords(3) + ignored, "ok")
    # a DEPOT_SECTION ends with -1: DIMENSION + 1 lines, and not one more
    check_vrplib_layout(head + "DEPOT_SECTION\n1\n2\n3\n-1\n", "ok")
    with pytest.raises(InstanceError) as err:
        check_vrplib_layout(head + "DEPOT_SECTION\n1\n2\n3\n4\n-1\n", "src")
    assert str(err.value) == "src: field 'DEPOT_SECTION' = '5 lines': more than DIMENSION 3 allows"


@pytest.mark.parametrize(
    ("line", "value", "problem"),
    [
        ("", None, "missing field"),
        ("DIMENSION : three\n", "three", "expected an integer >= 2"),
        ("DIMENSION : 2.5\n", 2.5, "expected an integer >= 2"),
        ("DIMENSION : 1\n", 1, "expected an integer >= 2"),
        (
            f"DIMENSION : {MAX_READER_NODES + 1}\n",
            MAX_READER_NODES + 1,
            f"more than the {MAX_READER_NODES} nodes a reader takes",
        ),
    ],
)
def test_dimension_is_checked_before_vrplib(
    tmp_path: Path, vrplib_unreached: None, line: str, value: object, problem: str
) -> None:
    text = f"NAME : t\nTYPE : TSP\n{line}EDGE_WEIGHT_TYPE : EUC_2D\nNODE_COORD_SECTION\n"
    path = write_file(tmp_path, "dim.tsp", text + coords(3))
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    assert str(err.value) == f"{path}: field 'DIMENSION' = {value!r}: {problem}"


@pytest.mark.parametrize("digits", [20, 30, 308])
def test_an_integer_past_int64_is_refused_as_the_number_it_is(tmp_path: Path, digits: int) -> None:
    """vrplib keeps such an integer as a Python int in an object array: a bare StopIteration
    traceback before (linc-solve, linc-eval, a 500 from the served model)."""
    text = "NODE_COORD_SECTION\n1 1 1\n2 " + "9" * digits + " 2\n3 5 5\n"
    path = write_file(tmp_path, "big.tsp", HEADER.format(3, "EUC_2D") + text)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    value = [float("9" * digits), 2.0]
    assert str(err.value) == f"{path}: field 'locs[1]' = {value!r}: a coordinate beyond +-1e+09"
    demand = "DEMAND_SECTION\n1 0\n2 " + "9" * digits + "\n3 1\nDEPOT_SECTION\n1\n-1\n"
    path = write_file(tmp_path, "big.vrp", CVRP + "NODE_COORD_SECTION\n" + coords(3) + demand)
    with pytest.raises(InstanceError) as err:
        read_cvrplib(path)
    assert str(err.value) == (
        f"{path}: field 'demand[1]' = {float('9' * digits)!r}: exceeds the vehicle capacity 10: "
        "no route can serve this customer"
    )


@pytest.mark.parametrize("digits", [309, 4300, 5000])
def test_an_integer_past_float64_is_named_short(tmp_path: Path, digits: int) -> None:
    text = "NODE_COORD_SECTION\n1 1 1\n2 " + "9" * digits + " 2\n3 5 5\n"
    path = write_file(tmp_path, "big.tsp", HEADER.format(3, "EUC_2D") + text)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    shown = "9" * 24 + f"... ({digits} characters)"
    assert str(err.value) == (
        f"{path}: field 'NODE_COORD_SECTION node 2 x' = {shown!r}: {NOT_FINITE}"
    )


def test_a_word_in_a_section_is_named_short(tmp_path: Path) -> None:
    text = "NODE_COORD_SECTION\n1 1 1\n2 " + "x" * 100 + " 2\n3 5 5\n"
    path = write_file(tmp_path, "word.tsp", HEADER.format(3, "EUC_2D") + text)
    with pytest.raises(InstanceError) as err:
        read_tsplib(path)
    shown = "x" * 24 + "... (100 characters)"
    assert str(err.value) == f"{path}: field 'NODE_COORD_SECTION' = {shown!r}: not a number"


def test_a_linked_netrc_read_as_solomon_is_named_not_printed(tmp_path: Path) -> None:
    netrc = write_file(
        tmp_path, ".netrc", "machine mlflow.example.com\nlogin linc password N3trcS3cretPw\n"
    )
    (tmp_path / "C999.txt").symlink_to(netrc)
    with pytest.raises(InstanceError) as err:
        read_solomon(tmp_path / "C999.txt")
    assert str(err.value) == (
        f"{tmp_path / 'C999.txt'}: field 'VEHICLE section' = 'login ...': missing (expected on "
        "line 2 of the non-blank lines)"
    )
    assert "N3trc" not in str(err.value) and "linc" not in str(err.value).split("=")[1]


def test_a_long_solomon_token_is_named_short(data_dir: Path, tmp_path: Path) -> None:
    text = edit_solomon_row(solomon_text(data_dir), 5, 3, "t" + "0" * 60)
    path = write_file(tmp_path, "BAD.txt", text)
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    shown = "t" + "0" * 23 + "... (61 characters)"
    assert str(err.value) == (f"{path}: field 'CUSTOMER row 5 DEMAND' = {shown!r}: not an integer")


def test_a_solomon_file_of_more_rows_than_a_reader_takes_is_refused(tmp_path: Path) -> None:
    head = "BIG\nVEHICLE\nNUMBER CAPACITY\n50 200\nCUSTOMER\n"
    head += "CUST NO. XCOORD. YCOORD. DEMAND READY TIME DUE DATE SERVICE TIME\n"
    rows = "".join(f"{i} 1 1 0 0 100 0\n" for i in range(MAX_READER_NODES + 1))
    path = write_file(tmp_path, "BIG.txt", head + rows)
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert str(err.value) == (
        f"{path}: field 'CUSTOMER section' = '{MAX_READER_NODES + 1} rows': more than the "
        f"{MAX_READER_NODES} nodes a reader takes"
    )
