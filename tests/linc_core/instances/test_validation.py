"""The data checks every reader runs: one test per class of bad data, each derived from a
real Solomon file by editing one value."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from linc_core.instances import Instance, InstanceError, read_solomon, validate_instance
from linc_core.instances.validation import (
    check_loads,
    check_time_windows,
    instance_from_arrays,
)
from tests.instance_helpers import assert_names, edit_solomon_row, solomon_text, write_file


def test_negative_demand(data_dir: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path, "NEG.txt", edit_solomon_row(solomon_text(data_dir), 5, 3, "-10"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "demand[5]", -10)


def test_ready_after_due(data_dir: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path, "TW.txt", edit_solomon_row(solomon_text(data_dir), 3, 4, "200"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "time_windows[3]", [200, 146])


def test_demand_above_capacity(data_dir: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path, "BIG.txt", edit_solomon_row(solomon_text(data_dir), 5, 3, "250"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "demand[5]", 250)
    assert "capacity 200" in str(err.value)


def test_customer_unservable_alone_by_due(data_dir: Path, tmp_path: Path) -> None:
    # Customer 1 sits at (45, 68), 18.68 from the depot (40, 50): a due of 18 is unreachable.
    text = edit_solomon_row(solomon_text(data_dir), 1, 4, "0")
    path = write_file(tmp_path, "EARLY.txt", edit_solomon_row(text, 1, 5, "18"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "time_windows[1]", [0, 18])
    assert "arrival 18.6815" in str(err.value)


def test_customer_unservable_alone_by_depot_due(data_dir: Path, tmp_path: Path) -> None:
    # Ready 1130 + service 90 + 18.68 back = 1238.68 > depot due 1236.
    text = edit_solomon_row(solomon_text(data_dir), 1, 4, "1130")
    path = write_file(tmp_path, "LATE.txt", edit_solomon_row(text, 1, 5, "1200"))
    with pytest.raises(InstanceError) as err:
        read_solomon(path)
    assert_names(err, path, "time_windows[1]", [1130, 1200])
    assert "1236" in str(err.value)
    # One time unit earlier it fits: 1127 + 90 + 18.68 = 1235.68 <= 1236.
    text = edit_solomon_row(solomon_text(data_dir), 1, 4, "1127")
    assert read_solomon(write_file(tmp_path, "FITS.txt", edit_solomon_row(text, 1, 5, "1200")))


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


# Array rows (a served request's): the same checks as a file's, plus numbers and shapes.
ROW = {
    "locs": [[0.0, 0.0], [3.0, 4.0], [6.0, 8.0]],
    "demand": [0.0, 2.0, 3.0],
    "capacity": 10.0,
    "time_windows": [[0.0, 100.0], [0.0, 50.0], [10.0, 60.0]],
    "service_time": [0.0, 1.0, 1.0],
}
NAN, INF = float("nan"), float("inf")


def test_an_array_row_is_read_like_a_file() -> None:
    instance = instance_from_arrays("cvrptw", "row 0", names=["r"], **ROW)
    assert instance.num_customers == 2 and instance.names == ("r",)
    assert instance.locs.dtype == torch.float64  # as the readers give it
    assert instance_from_arrays("cvrp", "row 0", ROW["locs"], demand=ROW["demand"], capacity=5)
    assert instance_from_arrays("tsp", "row 0", ROW["locs"]).num_customers == 3


@pytest.mark.parametrize(
    ("change", "field", "value", "problem"),
    [
        ({"capacity": -10.0}, "capacity", -10, "must be positive"),
        ({"capacity": 0.0}, "capacity", 0, "must be positive"),
        ({"capacity": INF}, "capacity", INF, "must be positive"),
        ({"capacity": 1e300}, "capacity", 1e300, "at most 1e+09"),
        # float32, where the environments divide by it, makes 1e-300 a 0 and the ratios NaN
        (
            {"capacity": 1e-300, "demand": [0.0, 1e-301, 1e-301]},
            "capacity",
            1e-300,
            "at least 1.175e-38, float32's smallest normal number",
        ),
        ({"travel_time_scale": 1e-300}, "travel_time_scale", 1e-300, "at least 1.175e-38"),
        ({"demand": [0.0, -4.0, 3.0]}, "demand[1]", -4, "negative"),
        ({"demand": [0.0, 2.0, NAN]}, "demand[2]", None, "non-finite"),
        ({"demand": [0.0, 11.0, 3.0]}, "demand[1]", 11, "exceeds the vehicle capacity"),
        ({"locs": [[0.0, 0.0], [NAN, 4.0], [6.0, 8.0]]}, "locs[1]", None, "non-finite"),
        ({"locs": [[0.0, 0.0], [3.0, 4.0], [1e300, 8.0]]}, "locs[2]", [1e300, 8.0], "beyond"),
        (
            {"time_windows": [[0.0, 100.0], [60.0, 50.0], [10, 60]]},
            "time_windows[1]",
            [60, 50],
            "ready time is after the due time",
        ),  # fmt: skip
        (
            {"time_windows": [[0.0, INF], [0.0, 50.0], [10, 60]]},
            "time_windows[0]",
            [0, INF],
            "not finite",
        ),  # fmt: skip
        ({"service_time": [0.0, -1.0, 1.0]}, "service_time[1]", -1, "negative"),
        ({"demand": [0.0, 2.0]}, "demand", "shape [2]", "expected [3] for 3 nodes"),
        ({"time_windows": [[0.0, 100.0]]}, "time_windows", "shape [1, 2]", "expected [3, 2]"),
        ({"locs": [[0.0, 0.0, 0.0]]}, "locs", "shape [1, 3]", "expected [N, 2]"),
        ({"locs": [[0.0, 0.0], [1.0]]}, "locs", "list", "not numbers of one regular shape"),
        ({"capacity": "ten"}, "capacity", "ten", "not numbers"),
        ({"capacity": [1.0, 2.0]}, "capacity", "shape [2]", "expected a number or [1]"),
    ],
)
def test_a_bad_array_row_is_one_error_naming_the_field(change, field, value, problem) -> None:
    with pytest.raises(InstanceError) as err:
        instance_from_arrays("cvrptw", "row 3 (mine)", **(ROW | change))
    message = str(err.value)
    assert message.startswith(f"row 3 (mine): field '{field}' = ") and problem in message
    assert "\n" not in message
    if value is not None:
        assert err.value.value == value


def test_a_row_without_customers_is_refused() -> None:
    with pytest.raises(InstanceError, match="no customer"):
        instance_from_arrays("cvrp", "row 0", [[0.0, 0.0]], demand=[0.0], capacity=1.0)
    with pytest.raises(InstanceError, match="expected"):
        instance_from_arrays("tsp", "row 0", [])


# One bad value per case (row 37 of 64): the batched checks must name exactly what checking
# that row alone names, and pass every good row.
BATCH_EDITS = [
    ("locs", (5, 1), float("nan")),
    ("locs", (9, 0), 2e9),
    ("grid_size", (), float("inf")),
    ("capacity", (), 0.0),
    ("demand", (3,), -2.0),
    ("demand", (0,), 1.0),
    ("demand", (7,), 1e6),
    ("travel_time_scale", (), float("nan")),
    ("service_time", (2,), -1.0),
    ("time_windows", (6, 1), float("inf")),
    ("time_windows", (4, 0), 1e5),
    ("time_windows", (8, 1), 0.0),  # due before the earliest arrival
    ("time_windows", (0, 1), 1.0),  # depot due: no customer can come back in time
]


@pytest.mark.parametrize(("field", "index", "value"), BATCH_EDITS)
def test_the_batched_checks_name_what_one_row_alone_names(field, index, value) -> None:
    from linc_core.problems import generate_cvrptw_envelope

    good = generate_cvrptw_envelope(64, 20, seed=5).to(dtype=torch.float64)
    validate_instance(good, "generated")  # every row passes
    tensor = getattr(good, field).clone()
    tensor[(37, *index)] = value
    bad = dataclasses.replace(good, **{field: tensor})
    with pytest.raises(InstanceError) as alone:
        validate_instance(bad.select([37]), "generated")
    with pytest.raises(InstanceError) as batched:
        validate_instance(bad, "generated")
    assert batched.value.source == "generated (row 37: 37)"
    for name in ("field", "problem"):
        assert getattr(batched.value, name) == getattr(alone.value, name)
    assert repr(batched.value.value) == repr(alone.value.value)
    # The per-row checks a problem's hook calls give the same answer outside a batched pass.
    if field not in ("locs", "grid_size"):
        row_check = check_loads if field in ("capacity", "demand") else check_time_windows
        with pytest.raises(InstanceError) as direct:
            row_check(bad, 37, "row")
        assert direct.value.field == alone.value.field
        row_check(bad, 36, "row")  # a good row passes
