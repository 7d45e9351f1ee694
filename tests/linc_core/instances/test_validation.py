"""The data checks every reader runs: one test per class of bad data, each derived from a
real Solomon file by editing one value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from linc_core.instances import Instance, InstanceError, read_solomon, validate_instance
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
