"""The ``linc-solve`` command: format detection, printed results and exit codes."""

from __future__ import annotations

import pytest

from linc_core.commands.solve import main
from linc_core.evaluate import pyvrp_solver
from linc_core.instances.any_file import detect_format
from linc_core.verify import VerifyResult, Violation
from tests.linc_core.evaluate.test_pyvrp_solver import SEED


def test_detect_format(data_dir):
    assert detect_format(data_dir / "solomon100" / "C101.txt") == "solomon"
    assert detect_format(data_dir / "tsplib" / "eil51.tsp") == "tsplib"
    assert detect_format(data_dir / "cvrplib_x" / "X-n101-k25.vrp") == "cvrplib"


def test_cli_prints_verified_solution(data_dir, capsys):
    path = data_dir / "solomon100" / "C101.txt"
    exit_code = main([str(path), "--seconds", "2", "--seed", str(SEED)])
    output = capsys.readouterr().out

    assert exit_code == 0
    lines = output.splitlines()
    assert lines[0].startswith("instance: C101")
    assert "convention: dimacs" in output  # auto picks the Solomon benchmark's convention
    route_lines = [line for line in lines if line.startswith("Route #")]
    served = sorted(int(node) for line in route_lines for node in line.split(":")[1].split())
    assert served == list(range(1, 101))
    fields = dict(line.split(": ", 1) for line in lines if not line.startswith("Route #"))
    assert fields["cost"].endswith("(verified, feasible)")
    assert int(fields["routes"]) == len(route_lines)
    assert float(fields["bks"]) == pytest.approx(827.3)
    assert float(fields["gap"].rstrip("%")) < 1.0
    assert float(fields["runtime"].split()[0]) > 0


def test_cli_unreadable_file_returns_error(tmp_path, capsys):
    bogus = tmp_path / "nothing.txt"
    bogus.write_text("not a routing instance\n")
    assert main([str(bogus), "--seconds", "1"]) == 2
    assert "linc-solve:" in capsys.readouterr().err


def test_cli_reports_verifier_rejection(data_dir, monkeypatch, capsys):
    # Conservative rounding keeps real solutions feasible, so stand in a verifier that
    # rejects everything to check that a rejection is printed and turns into exit code 1.
    real_verify = pyvrp_solver.verify_instance

    def rejecting_verify(instance, index, routes, convention="exact"):
        verdict = real_verify(instance, index, routes, convention)
        late = Violation("time_window", 0, routes[0][0], "injected late arrival")
        return VerifyResult(verdict.cost, (late,), verdict.num_routes)

    monkeypatch.setattr(pyvrp_solver, "verify_instance", rejecting_verify)
    path = data_dir / "tsplib" / "eil51.tsp"
    assert main([str(path), "--seconds", "0.3"]) == 1
    captured = capsys.readouterr()
    assert "(verified, INFEASIBLE)" in captured.out
    assert "violation: time_window: injected late arrival" in captured.err


def test_cli_notes_a_convention_mismatch(data_dir, capsys):
    path = data_dir / "tsplib" / "eil51.tsp"
    assert main([str(path), "--seconds", "0.3", "--convention", "exact"]) == 0
    assert "note: the bks is stated under tsplib, this cost under exact" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--seconds", "nan"], "--seconds nan: expected a finite number > 0"),  # was: a hang
        (["--seconds", "inf"], "--seconds inf: expected a finite number > 0"),
        (["--seconds", "0"], "--seconds 0.0: expected a finite number > 0"),
        (["--seconds", "1", "--seed", "-1"], "--seed -1: expected an integer from 0 to 4294967295"),
        (
            ["--seconds", "1", "--seed", "4294967296"],
            "--seed 4294967296: expected an integer from 0 to 4294967295",
        ),
    ],
)
def test_cli_refuses_a_budget_or_seed_pyvrp_cannot_take_in_one_line(
    flags, message, data_dir, capsys
):
    assert main([str(data_dir / "solomon100" / "C101.txt"), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"linc-solve: {message}\n"
