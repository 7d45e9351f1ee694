"""Helpers of the instance and generator tests: field-by-field equality, and real benchmark
files edited to carry one defect each."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from linc_core.instances import TENSOR_FIELDS, Instance, InstanceError


def same_tensors(a: Instance, b: Instance) -> bool:
    """Every tensor field equal, value for value."""
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in TENSOR_FIELDS)


def solomon_text(data_dir: Path, name: str = "C101") -> str:
    return (data_dir / "solomon100" / f"{name}.txt").read_text()


def edit_solomon_row(text: str, customer: int, column: int, value: str) -> str:
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


def write_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def assert_names(err: pytest.ExceptionInfo[InstanceError], path: Path, field: str, value: object):
    message = str(err.value)
    assert path.name in message
    assert f"'{field}'" in message and err.value.field == field
    assert repr(value) in message and err.value.value == value
