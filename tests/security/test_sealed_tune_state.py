"""Tune's saved state is read back only when its seal holds (issue 34): a sweep's folder on
shared storage holds ``tuner.pkl``, ``experiment_state-*.json`` and the searcher's state, which
``Tuner.restore`` unpickles with cloudpickle. An attacker who can write the storage replaces
them with a booby-trapped pickle (its ``__reduce__`` touches a marker file; shown to fire when
loaded the way Tune loads it) and waits for the re-run.

One real ``linc-tune`` (smoke preset, one epoch, a home and key of its own), then re-runs of the
same command: a trapped file whose sealed copy was trapped too stops the re-run with exit 2 and
one line naming it, nothing of it read (no marker); a trapped file beside an intact sealed copy
and a cut one are put back and the sweep resumes; a key file others can read, another host's
key and a folder without a seal are refused in one line, and the folder sealed once the user
says so (``cluster.trust_unsealed_state=true``) resumes with the writing host's key given in
``LINC_STATE_KEY``. The seal and its checks on S3 (moto) at the end.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import ray.cloudpickle

from tests.conftest import Trap, sweep_env, trapped_pickle

SWEEP = "train-full_linc-cvrptw-seed1234"
OTHER_KEY = "c3" * 32


def trapped_experiment_state(marker: Path, real: bytes) -> bytes:
    """The real experiment state with Tune's cloudpickle escape in it, which Tune's decoder
    (``_loads_with_cloudpickle``) unpickles."""
    from ray.tune.utils.serialization import _loads_with_cloudpickle

    state = json.loads(real)
    blob = ray.cloudpickle.dumps(Trap(marker)).hex()
    state["runner_data"] = {"_type": "CLOUDPICKLE_FALLBACK", "value": blob}
    content = json.dumps(state).encode()
    _loads_with_cloudpickle(content)
    assert marker.exists()
    marker.unlink()
    return content


class Sweep:
    """The sweep's working folder, its environment and a pristine copy of its Tune folder."""

    def __init__(self, work: Path, env: dict[str, str]):
        self.work, self.env = work, env
        self.folder = work / "runs" / SWEEP
        self.pristine = work / "pristine"
        self.marker = work / "MARKER"

    def run(self, *overrides: str, **env: str) -> tuple[int, str]:
        done = subprocess.run(
            [sys.executable, "-m", "sweeps.train", "preset=smoke", "train.epochs=1",
             f"cluster.storage={self.work / 'runs'}", *overrides],
            cwd=self.work, env=self.env | env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return done.returncode, done.stdout + done.stderr

    def reset(self) -> None:
        shutil.rmtree(self.folder)
        shutil.copytree(self.pristine, self.folder)

    def refused(self, *overrides: str, **env: str) -> str:
        """Re-run; assert exit 2 with one line, no traceback, no marker; the line."""
        rc, console = self.run(*overrides, **env)
        lines = console.splitlines()
        assert rc == 2 and len(lines) == 1, console[-3000:]
        assert "Traceback" not in console and not self.marker.exists()
        assert lines[0].startswith("linc-tune: ")
        return lines[0]

    def resumed(self, *overrides: str, **env: str) -> str:
        """Re-run; assert it resumed the sweep (its parent run, no new trial); the console."""
        rc, console = self.run(*overrides, **env)
        assert rc == 0 and "Traceback" not in console, console[-3000:]
        assert parent_run(console) == self.parent and "1 trials: 1 finished" in console
        assert sorted(p.name for p in self.folder.glob("trial_*")) == self.trials
        assert not self.marker.exists()
        return console


def parent_run(console: str) -> str:
    return re.search(r"MLflow parent run (\w+)", console).group(1)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    work = tmp_path_factory.mktemp("sealed")
    ray_temp = Path(tempfile.mkdtemp(prefix="lr-", dir="/tmp"))  # short: Ray's socket paths
    env = sweep_env(RAY_TMPDIR=str(ray_temp), HOME=str(work / "home"))
    env.pop("LINC_STATE_KEY", None)
    started = time.monotonic()
    done = Sweep(work, env)
    rc, console = done.run()
    assert rc == 0, console[-3000:]
    print(f"first sweep: {time.monotonic() - started:.0f} s")
    done.parent = parent_run(console)
    done.trials = sorted(p.name for p in done.folder.glob("trial_*"))
    shutil.copytree(done.folder, done.pristine)
    try:
        yield done
    finally:
        shutil.rmtree(ray_temp, ignore_errors=True)


def test_a_trapped_tuner_pkl_whose_copy_is_trapped_too_is_never_read(sweep) -> None:
    sweep.reset()
    trap = trapped_pickle(sweep.marker)
    for place in (sweep.folder / "tuner.pkl", sweep.folder / ".linc-intact" / "tuner.pkl"):
        place.write_bytes(trap)
    line = sweep.refused()
    assert f"{sweep.folder / 'tuner.pkl'} was changed outside this driver" in line
    assert "new sweep name or delete the folder" in line


def test_a_trapped_experiment_state_whose_copy_is_trapped_too_is_never_read(sweep) -> None:
    sweep.reset()
    [state] = sweep.folder.glob("experiment_state-*.json")
    trap = trapped_experiment_state(sweep.marker, state.read_bytes())
    for place in (state, sweep.folder / ".linc-intact" / state.name):
        place.write_bytes(trap)
    assert f"{state} was changed outside this driver" in sweep.refused()


def test_a_trapped_file_and_a_cut_one_are_put_back_and_the_sweep_resumes(sweep) -> None:
    sweep.reset()
    (sweep.folder / "tuner.pkl").write_bytes(trapped_pickle(sweep.marker))
    [searcher] = sweep.folder.glob("basic-variant-state-*.json")
    searcher.write_bytes(searcher.read_bytes()[:100])  # the storage filled up mid-copy
    console = sweep.resumed()
    put_back = [line for line in console.splitlines() if "put back its last intact copy" in line]
    assert len(put_back) == 2, console[-3000:]
    assert any(f"{sweep.folder / 'tuner.pkl'} matches none of its seals" in x for x in put_back)
    assert any(f"{searcher} was damaged (cut short, 100 bytes" in x for x in put_back)
    for name in ("tuner.pkl", searcher.name):
        assert (sweep.folder / name).read_bytes() == (sweep.pristine / name).read_bytes()


def test_a_key_file_others_can_read_is_refused(sweep) -> None:
    sweep.reset()
    key_file = sweep.work / "home" / ".config" / "linc" / "state.key"
    key_file.chmod(0o644)
    try:
        line = sweep.refused()
    finally:
        key_file.chmod(0o600)
    assert f"linc-tune: {key_file}: the key that seals Tune's state is open to others" in line
    assert "(mode 0644)" in line and f"chmod 600 {key_file}" in line


def test_another_hosts_key_and_an_unsealed_folder_are_refused_then_trusted_once(sweep) -> None:
    sweep.reset()
    line = sweep.refused(LINC_STATE_KEY=OTHER_KEY)
    assert f"{sweep.folder}/" in line and " was sealed with another key" in line
    assert "set LINC_STATE_KEY to the key of the host that wrote it" in line
    assert OTHER_KEY not in line
    # a sweep from before linc sealed Tune's state: refused, then accepted once when asked,
    # on a host given the writing host's key
    (sweep.folder / ".linc-intact" / "seal.json").unlink()
    moved = {"LINC_STATE_KEY": (sweep.work / "home" / ".config/linc/state.key").read_text()}
    line = sweep.refused(**moved)
    assert "has no seal" in line and "cluster.trust_unsealed_state=true" in line
    console = sweep.resumed("cluster.trust_unsealed_state=true", **moved)
    assert "had no seal (cluster.trust_unsealed_state): accepted as it is and sealed now" in console
    assert (sweep.folder / ".linc-intact" / "seal.json").exists()
    assert "accepted" not in sweep.resumed(**moved)  # sealed: an untouched re-run just resumes


def test_the_seal_holds_on_s3(monkeypatch, s3_server) -> None:
    """Sealing, putting back and refusing on S3 (a moto server), as on a cluster's storage."""
    import pyarrow.fs as pafs

    from orchestration.data.storage import open_filesystem
    from orchestration.experiment.folder import SweepFolder
    from orchestration.experiment.tune_state import StateKeeper, check_state, keep_intact
    from orchestration.failures import SweepRefused

    monkeypatch.setenv("LINC_STATE_KEY", OTHER_KEY)  # not the user's key file
    filesystem, root = open_filesystem(s3_server.uri("sealed-runs"))
    folder = f"{root}/{SWEEP}"
    with tempfile.TemporaryDirectory() as staging:
        Path(staging, "tuner.pkl").write_bytes(ray.cloudpickle.dumps({"a": 1}))
        Path(staging, "experiment_state-x.json").write_bytes(b'{"trial_data": []}')
        keeper = StateKeeper(SweepFolder(filesystem, folder))
        assert sorted(keep_intact(keeper, {}, source=staging)) == [
            "experiment_state-x.json",
            "tuner.pkl",
        ]
        pafs.copy_files(staging, folder, destination_filesystem=filesystem)  # Tune's upload
    with filesystem.open_output_stream(f"{folder}/tuner.pkl") as out:
        out.write(b"\x80\x05junk")
    assert check_state(keeper.folder).put_back == ("tuner.pkl",)
    for path in (f"{folder}/tuner.pkl", f"{folder}/.linc-intact/tuner.pkl"):
        with filesystem.open_output_stream(path) as out:
            out.write(ray.cloudpickle.dumps({"a": 2}))
    with pytest.raises(SweepRefused, match="tuner.pkl was changed outside this driver"):
        check_state(keeper.folder)
