"""The GPU check (``bench/gpu``) in its CPU mode: it runs, prints its table, marks GPU rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_in_cpu_mode(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "gpu.json"
    env = {**os.environ, "LINC_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu", "--device", "cpu", "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    rows = record["rows"]
    by_section = {s: [r for r in rows if r["section"] == s] for s in
                  ("correctness", "precision", "sync", "throughput")}  # fmt: skip
    # the twelve variants' steps and six decodes: GPU rows not run, their CPU side ran
    assert len(by_section["correctness"]) == 18
    assert all(r["status"] == "not run" for r in by_section["correctness"])
    assert all("CPU side" in r["detail"] for r in by_section["correctness"])
    assert all("4/4 verified" in r["detail"] for r in by_section["correctness"][12:])
    # bf16 on CPU runs through the training code path; fp16 is CUDA-only
    bf16 = [r for r in by_section["precision"] if "bf16" in r["name"]]
    assert [r["status"] for r in bf16] == ["pass", "info"]
    assert all(r["status"] == "not run" for r in by_section["sync"] + by_section["throughput"])
    # the compiled decoding step runs (and passes) on CPU; its CUDA-graphs row needs CUDA
    compiled = [r for r in rows if r["section"] == "compile"]
    assert [r["status"] for r in compiled] == ["pass", "not run"]
    assert compiled[0]["name"].startswith("torch.compile decode step vs eager")
    assert compiled[1]["detail"] == "CUDA graphs need CUDA"
    assert record["device"] == "cpu" and not any(r["status"] == "FAIL" for r in rows)
    table = done.stdout
    assert "summary: " in table and "not run" in table
    assert table.count("\n") == len(rows) + 3  # header, column names, rows, summary


def test_a_bad_argument_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu", "--sections", "speed"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--sections: unknown ['speed']" in done.stderr
    assert "Traceback" not in done.stderr
