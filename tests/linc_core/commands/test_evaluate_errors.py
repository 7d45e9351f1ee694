"""``linc-eval`` and ``linc-solve`` on a user's own files: never a traceback, every point named.

A folder of Solomon files as users have them (lower-case names, a ``bks.csv`` in upper case, a
note and the best-known ``.sol`` files beside them), missing and broken inputs, ``--limit``,
strict JSON, explicit decoding budgets, and routes written per instance that ``linc-solve
--verify`` re-checks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from linc_core.commands.evaluate import main as eval_main
from linc_core.commands.solve import main as solve_main
from tests.conftest import CUDA_DEVICES_SEEN, tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")


@pytest.fixture
def user_folder(data_dir, tmp_path) -> Path:
    """c101.txt and r101.txt, a bks.csv naming them C101/R101 (only C101 has a value, R101's
    row is absent), a README.txt and the folder's own .sol files."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("C101", "R101"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", folder / f"{name.lower()}.txt")
        shutil.copy(data_dir / "solomon100" / f"{name}.sol", folder / f"{name}.sol")
    (folder / "bks.csv").write_text("instance,vehicles,bks\nC101,10,827.3\n")
    (folder / "README.txt").write_text("Instances from my thesis, see bks.csv.\n")
    return folder


def _eval(checkpoint: Path, benchmark: Path | str, out: Path, *extra: str) -> int:
    args = ["--checkpoint", str(checkpoint), "--benchmark", str(benchmark), "--out", str(out)]
    return eval_main([*args, "--aug", "1", "--plot", "0", "--no-progress", *extra])


def _strict_json(path: Path) -> dict:
    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_bks_matched_ignoring_case_and_the_rest_counted_in_a_warning(
    checkpoint, user_folder, tmp_path, capsys
):
    out = tmp_path / "out"
    assert _eval(checkpoint, user_folder, out, "--decode", "greedy") == 0
    err = capsys.readouterr().err
    assert "warning: 1 of 2 instances have no best-known value (r101); their Gap is --" in err
    summary = _strict_json(out / "summary.json")
    assert summary["instances_with_bks"] == 1 and summary["mean_bks"] == 827.3
    assert summary["mean_pyvrp_gap_pct"] is None  # NaN written as null: strict JSON
    rows = (out / "rows.csv").read_text().splitlines()
    c101 = next(r for r in rows if r.startswith("c101,")).split(",")
    assert float(c101[7]) == 827.3  # the bks column


def test_files_that_are_not_instances_are_skipped_with_a_note(
    checkpoint, user_folder, tmp_path, capsys
):
    """An instance's own solution file (C101.sol beside c101.txt) belongs with the set and is
    not reported; a solution without its instance and other files are."""
    (user_folder / "RC101.sol").write_text("Route #1: 1\n")
    assert _eval(checkpoint, user_folder, tmp_path / "out", "--decode", "greedy") == 0
    err = capsys.readouterr().err
    expected = (
        "note: skipped RC101.sol (not a .txt file), README.txt (a .txt without the VEHICLE"
        " and CUSTOMER sections)\n"
    )
    assert expected in err
    assert "error:" not in err
    rows = (tmp_path / "out" / "rows.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["c101", "r101"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing folder", "--benchmark '{folder}': not a known set"),
        ("empty folder", "--benchmark {folder}: no instance file in it"),
        ("notes only", "--benchmark {folder}: no instance file in it (1 other files skipped)"),
        ("missing checkpoint", "--checkpoint {ckpt}: no such file"),
        ("folder checkpoint", "--checkpoint {ckpt}: a folder; give the checkpoint file (.pt)"),
        ("garbage checkpoint", "--checkpoint {ckpt}: not a readable linc checkpoint ("),
    ],
)
def test_inputs_that_cannot_start_are_one_line_and_exit_2(
    case, message, checkpoint, tmp_path, capsys
):
    folder, ckpt = tmp_path / "set", checkpoint
    if case != "missing folder":
        folder.mkdir()
    if case == "notes only":
        (folder / "notes.md").write_text("nothing here")
    if case == "missing checkpoint":
        ckpt = tmp_path / "nope.pt"
    elif case == "folder checkpoint":
        ckpt = tmp_path
    elif case == "garbage checkpoint":
        ckpt = tmp_path / "garbage.pt"
        ckpt.write_bytes(b"\x00not a torch file" * 10)
    if case.endswith("checkpoint"):  # a readable set, so the checkpoint is at fault
        folder = "synthetic-cvrptw-5"
    assert _eval(ckpt, folder, tmp_path / "out", "--count", "2") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("linc-eval: " + message.format(folder=folder, ckpt=ckpt))
    assert not (tmp_path / "out").exists()


def test_limit_keeps_the_first_files_errors_included(checkpoint, data_dir, tmp_path, capsys):
    folder = tmp_path / "set"
    folder.mkdir()
    for name in ("C101", "C102"):
        shutil.copy(data_dir / "solomon100" / f"{name}.txt", folder / f"{name}.txt")
    broken = (data_dir / "solomon100" / "R101.txt").read_text()[:1500]  # cut mid-row
    (folder / "R101.txt").write_text(broken)
    assert _eval(checkpoint, folder, tmp_path / "two", "--limit", "2", "--decode", "greedy") == 0
    assert "R101" not in capsys.readouterr().err  # beyond the limit: not read, not reported
    assert _eval(checkpoint, folder, tmp_path / "all", "--decode", "greedy") == 1
    assert "error: R101.txt:" in capsys.readouterr().err
    assert _strict_json(tmp_path / "all" / "summary.json")["errors"] == 1


def test_decoding_budget_is_explicit_and_greedy_defaults_to_one_rollout(
    checkpoint, tmp_path, capsys
):
    out = tmp_path / "out"
    assert _eval(checkpoint, "synthetic-cvrptw-5", out, "--count", "2", "--decode", "greedy") == 0
    printed = capsys.readouterr().out
    assert "decoding 2 instances: greedy z=1 x1, 1 rollouts per instance" in printed
    assert "| Full LINC greedy z=1 x1 |" in printed
    decode = _strict_json(out / "summary.json")["decode"]
    assert (decode["method"], decode["num_z"], decode["augment"]) == ("greedy", 1, 1)
    assert _eval(checkpoint, "synthetic-cvrptw-5", out, "--count", "1", "--z", "3") == 0
    assert "decoding 1 instances: sampling z=3 x1, 3 rollouts per instance" in (
        capsys.readouterr().out
    )
    with pytest.raises(SystemExit):
        eval_main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "(default: sampling 800, the paper's budget; greedy 1)" in help_text
    assert "greedy: argmax rollouts, --z per copy" in help_text


def test_routes_are_written_per_instance_and_reverified_by_linc_solve(
    checkpoint, user_folder, tmp_path, capsys
):
    out = tmp_path / "out"
    assert _eval(checkpoint, user_folder, out, "--decode", "greedy") == 0
    summary_rows = (out / "rows.csv").read_text().splitlines()[1:]
    costs = {r.split(",")[0]: float(r.split(",")[4]) for r in summary_rows}
    capsys.readouterr()
    for name, cost in costs.items():
        sol = out / "routes" / f"{name}.sol"
        text = sol.read_text()
        assert text.startswith("Route #1: ") and f"Instance {user_folder / name}.txt" in text
        assert "Convention dimacs" in text
        assert solve_main(["--verify", str(sol)]) == 0
        printed = capsys.readouterr().out
        assert "(verified, feasible)" in printed and "(reproduced)" in printed
        assert f"cost: {cost:.1f}" in printed
    # a tampered cost is caught
    sol = out / "routes" / "c101.sol"
    tampered = [
        "Cost 1.0" if line.startswith("Cost") else line for line in sol.read_text().splitlines()
    ]
    sol.write_text("\n".join(tampered) + "\n")
    assert solve_main(["--verify", str(sol)]) == 1
    assert "file cost: 1.0 (NOT reproduced)" in capsys.readouterr().out


def test_linc_solve_verifies_the_benchmarks_own_solution_files(data_dir, capsys):
    folder = data_dir / "solomon100"
    assert solve_main([str(folder / "C101.txt"), "--verify", str(folder / "C101.sol")]) == 0
    printed = capsys.readouterr().out
    assert "cost: 827.3 (verified, feasible)" in printed and "file cost: 827.3 (reproduced)" in (
        printed
    )
    assert solve_main(["--verify", str(folder / "C101.sol")]) == 2  # no Instance line
    assert "give the instance: linc-solve INSTANCE --verify" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.txt", b"", "field 'file' = '': empty file"),
        ("binary.vrp", bytes(range(256)) * 4, "'binary content': not a text file"),
        ("no_vehicle.txt", b"C101\n\nCUSTOMER\n", "VEHICLE section' = 'CUSTOMER': missing"),
        ("notes.dat", b"hello", "extension '.dat' is not one linc reads: .txt (Solomon)"),
    ],
)
def test_linc_solve_picks_the_reader_by_extension_and_shows_its_reason(
    name, content, reason, tmp_path, capsys
):
    path = tmp_path / name
    path.write_bytes(content)
    assert solve_main([str(path), "--seconds", "0.1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"linc-solve: {path}") and reason in err and err.count("\n") == 1


def test_linc_solve_reads_a_solomon_file_with_a_long_name_line(data_dir, tmp_path, capsys):
    text = (data_dir / "solomon100" / "C101.txt").read_text().splitlines()
    text[0] = "C101 " + "with a very long description " * 100  # the name line: 3,000 characters
    path = tmp_path / "LONG.TXT"
    path.write_text("\n".join(text) + "\n")
    assert solve_main([str(path), "--seconds", "0.5"]) == 0
    assert "(solomon, cvrptw, 100 customers)" in capsys.readouterr().out


def _unwritable_out(tmp_path: Path, case: str) -> Path:
    """An --out linc cannot write: below a file, a file itself, or a link to a file."""
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    if case == "below a file":
        return afile / "out"
    if case == "deep below a file":
        return afile / "a" / "b" / ".." / "out"
    if case == "a file":
        return afile
    link = tmp_path / "link"
    link.symlink_to(afile)  # "a link to a file"
    return link


@pytest.mark.parametrize(
    "case", ["below a file", "deep below a file", "a file", "a link to a file"]
)
def test_an_out_it_cannot_write_is_refused_before_decoding(checkpoint, tmp_path, case, capsys):
    out = _unwritable_out(tmp_path, case)
    assert _eval(checkpoint, "synthetic-cvrptw-5", out, "--count", "2") == 2
    captured = capsys.readouterr()
    assert "decoding" not in captured.out  # refused before any work
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"linc-eval: --out: cannot write to {out} (")
    assert (tmp_path / "afile").read_text() == "not a folder\n"


def test_out_through_a_link_to_a_folder_is_written(checkpoint, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert _eval(checkpoint, "synthetic-cvrptw-5", tmp_path / "link" / "out", "--count", "1") == 0
    assert (tmp_path / "real" / "out" / "summary.json").is_file()


@pytest.mark.parametrize("spec", ["C999", "c101,C999", "../c101", "3x", "-1"])
def test_plot_names_not_in_the_set_are_refused_before_decoding(
    checkpoint, user_folder, tmp_path, spec, capsys
):
    out = tmp_path / "out"
    args = ["--checkpoint", str(checkpoint), "--benchmark", str(user_folder), "--out", str(out)]
    assert eval_main([*args, "--aug", "1", "--plot", spec, "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "decoding" not in captured.out and not out.exists()
    unknown = ", ".join(n for n in spec.split(",") if n.casefold() not in ("c101", "r101"))
    assert captured.err == (
        f"linc-eval: --plot {spec}: no instance {unknown} in --benchmark {user_folder} "
        "(give a count, or names among c101, r101)\n"
    )


def test_plot_names_match_the_set_ignoring_case(checkpoint, user_folder, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    args = ["--checkpoint", str(checkpoint), "--benchmark", str(user_folder), "--out", str(out)]
    assert eval_main([*args, "--aug", "1", "--decode", "greedy", "--plot", "R101, C101,r101"]) == 0
    assert sorted(p.name for p in (out / "plots").iterdir()) == ["c101.png", "r101.png"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--z", "-1"], "--z -1: expected an integer >= 1"),
        (["--z", "0"], "--z 0: expected an integer >= 1"),  # was: quietly the default 800
        (["--limit", "-1"], "--limit -1: expected an integer >= 1"),  # was: all but the last
        (["--limit", "0"], "--limit 0: expected an integer >= 1"),
        (["--threads", "-1"], "--threads -1: expected an integer from 1 to 1024"),
        (["--threads", "99999999999"], "--threads 99999999999: expected an integer from 1 to 1024"),
        (["--decode", "sgbs", "--beam", "0"], "--beam: expected an int >= 1, got 0"),
        (
            ["--decode", "multistart", "--starts", "0"],
            "--starts: expected None or an int >= 1, got 0",
        ),
        (
            ["--expansion", "1"],
            "--expansion: expected an int >= 2 (the greedy child plus at least one more), got 1",
        ),
        (
            ["--max-rollouts-per-chunk", "0"],
            "--max-rollouts-per-chunk: expected an int >= 1, got 0",
        ),
        (
            ["--z", "99999999999"],
            "--z 99999999999: expected at most 2^16 = 65536, the checkpoint's distinct z-vectors",
        ),
        (
            ["--decode", "sgbs", "--sgbs-z", "65537"],
            "--sgbs-z 65537: expected at most 2^16 = 65536, the checkpoint's distinct z-vectors",
        ),
        (["--pyvrp-seconds", "nan"], "--pyvrp-seconds nan: expected a finite number >= 0"),
        (["--pyvrp-seconds", "inf"], "--pyvrp-seconds inf: expected a finite number >= 0"),
        (["--pyvrp-seconds", "-1"], "--pyvrp-seconds -1.0: expected a finite number >= 0"),
        (["--count", "0"], "--count 0: expected an integer >= 1"),
        (  # was: numpy's MemoryError traceback generating a billion instances
            ["--count", "1666667"],
            "--count 1666667: expected at most 1666666 instances of 5 customers (a synthetic "
            "set holds 10000000 nodes)",
        ),
        (
            ["--device", "cuda:99"],
            f"--device cuda:99: expected a CUDA device ({CUDA_DEVICES_SEEN})",
        ),  # was: blamed on the checkpoint (deserialising on CUDA)
        (["--data-seed", "-1"], "--data-seed -1: expected an integer >= 0"),
        (["--max-customers", "0"], "--max-customers 0: expected an integer >= 1"),
        (
            ["--benchmark", "synthetic-cvrptw-99999999"],
            "--benchmark synthetic-cvrptw-99999999: expected at most 100000 customers per "
            "instance, got 99999999",
        ),
    ],
)
def test_flags_out_of_range_are_one_line_and_exit_2_before_any_work(
    flags, message, checkpoint, tmp_path, capsys
):
    out = tmp_path / "out"
    argv = ["--checkpoint", str(checkpoint), "--benchmark", "synthetic-cvrptw-5", "--count", "1"]
    assert eval_main([*argv, "--out", str(out), "--decode", "greedy", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing decoded, no PyVRP run
    assert captured.err == f"linc-eval: {message}\n"
    assert not out.exists()
