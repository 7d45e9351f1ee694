"""orchestration.experiment.tune_state and orchestration.data.state_key: Tune's saved state is
sealed by the driver that wrote it; a re-run reads a state file only when its seal holds, puts
back a cut or changed one from its sealed copy, and refuses any other in one line."""

from __future__ import annotations

import json
import logging
import os
import pickle
import stat

import pyarrow.fs as pafs
import pytest

from linc_core.utils.secrets import redact
from orchestration.data.state_key import KEY_VARIABLE, key_file, key_id, state_key
from orchestration.experiment.folder import SweepFolder
from orchestration.experiment.tune_state import (
    KEEP_FOLDER,
    KEPT_DIGESTS,
    SEAL_FILE,
    TUNER_FILE,
    Seal,
    StateKeeper,
    check_state,
    earlier_names,
    is_intact,
    keep_intact,
    seal_digest,
)
from orchestration.failures import SweepRefused

SEARCHER = pickle.dumps({"_finished": True, "_total_samples": 12, "uuid": "a0e93_"}, protocol=5)
EXPERIMENT = json.dumps({"trial_data": [['{"trial_id": "a0e93_00000"}', "{}"]]}).encode()
SEARCHER_NAME = "basic-variant-state-2026-11-25_02-50-57.json"
EXPERIMENT_NAME = "experiment_state-2026-11-25_02-50-57.json"
KEY_A = "a1" * 32
KEY_B = "b2" * 32
TUNER = pickle.dumps({"tuner": "the sweep's"}, protocol=5)


@pytest.fixture(autouse=True)
def _own_key(monkeypatch, tmp_path):
    """A key of this test's own: ``$LINC_STATE_KEY`` (a test about the key file drops it), and a
    home of its own, so that no test reads or makes the user's key file."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(KEY_VARIABLE, KEY_A)


def sweep(tmp_path, *files: tuple[str, bytes]):
    folder = tmp_path / "runs" / "train-smoke"
    folder.mkdir(parents=True)
    for name, content in files:
        (folder / name).write_bytes(content)
    return folder, StateKeeper(SweepFolder(pafs.LocalFileSystem(), str(folder)))


def test_whole_files_are_intact_and_any_cut_is_not():
    assert is_intact(SEARCHER) and is_intact(EXPERIMENT)
    for cut in (0, 1, len(SEARCHER) // 2, len(SEARCHER) - 1):
        assert not is_intact(SEARCHER[:cut])
    for cut in (0, len(EXPERIMENT) // 2, len(EXPERIMENT) - 1):
        assert not is_intact(EXPERIMENT[:cut])


def test_a_seal_vouches_for_its_bytes_name_and_sweep_under_its_key_only():
    key = bytes.fromhex(KEY_A)
    seal = Seal(key_id(key))
    assert seal.add(key, "sweep", "tuner.pkl", SEARCHER)
    assert not seal.add(key, "sweep", "tuner.pkl", SEARCHER)  # already the newest
    assert seal.accepts(key, "sweep", "tuner.pkl", SEARCHER)
    assert not seal.accepts(key, "sweep", "tuner.pkl", SEARCHER + b" ")
    assert not seal.accepts(key, "sweep", "searcher-state.pkl", SEARCHER)  # another file's seal
    assert not seal.accepts(key, "other-sweep", "tuner.pkl", SEARCHER)  # another sweep's
    assert not seal.accepts(bytes.fromhex(KEY_B), "sweep", "tuner.pkl", SEARCHER)
    assert seal_digest(key, "a", b"bc") != seal_digest(key, "ab", b"c")  # label is delimited
    # the newest few versions stay accepted: storage may hold one Tune has not replaced yet
    versions = [json.dumps({"step": step}).encode() for step in range(KEPT_DIGESTS + 1)]
    for version in versions:
        seal.add(key, "sweep", EXPERIMENT_NAME, version)
    accepted = [seal.accepts(key, "sweep", EXPERIMENT_NAME, v) for v in versions]
    assert accepted == [False] + [True] * KEPT_DIGESTS
    assert key_id(key) != key_id(bytes.fromhex(KEY_B)) and KEY_A not in seal.to_json().decode()


def test_a_cut_state_file_is_put_back_from_its_sealed_copy(tmp_path, caplog):
    folder, keeper = sweep(
        tmp_path, (TUNER_FILE, TUNER), (SEARCHER_NAME, SEARCHER), (EXPERIMENT_NAME, EXPERIMENT)
    )
    (folder / "linc_lease.json").write_bytes(b"{")  # linc's own: never Tune's state
    (folder / ".validate_storage_marker").write_bytes(b"")  # Ray's empty marker
    (folder / "notes.txt").write_bytes(b"{")  # no suffix Tune reads
    seen: dict = {}
    assert sorted(keep_intact(keeper, seen)) == sorted([SEARCHER_NAME, EXPERIMENT_NAME, TUNER_FILE])
    assert keep_intact(keeper, seen) == []  # unchanged: nothing read again
    seal = json.loads((folder / KEEP_FOLDER / SEAL_FILE).read_bytes())
    assert set(seal["files"]) == {SEARCHER_NAME, EXPERIMENT_NAME, TUNER_FILE}
    # the storage fills up while Tune copies its state: one file emptied, one cut in half
    (folder / SEARCHER_NAME).write_bytes(b"")
    (folder / EXPERIMENT_NAME).write_bytes(EXPERIMENT[:10])
    assert keep_intact(keeper, seen) == []  # damaged copies are never sealed
    assert (folder / KEEP_FOLDER / SEARCHER_NAME).read_bytes() == SEARCHER
    with caplog.at_level(logging.WARNING):
        state = check_state(keeper.folder)
    assert state.restoring and state.files == {SEARCHER_NAME, EXPERIMENT_NAME, TUNER_FILE}
    assert sorted(state.put_back) == sorted([SEARCHER_NAME, EXPERIMENT_NAME])
    assert (folder / SEARCHER_NAME).read_bytes() == SEARCHER
    assert (folder / EXPERIMENT_NAME).read_bytes() == EXPERIMENT
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 2 and all("put back its last intact copy" in m for m in told)
    assert any(f"{folder / SEARCHER_NAME} was damaged (cut short, 0 bytes" in m for m in told)
    assert check_state(keeper.folder).put_back == ()  # nothing left to mend


def test_a_changed_state_file_is_put_back_and_one_whose_copy_changed_too_refused(tmp_path):
    folder, keeper = sweep(
        tmp_path, (TUNER_FILE, TUNER), (SEARCHER_NAME, SEARCHER), (EXPERIMENT_NAME, EXPERIMENT)
    )
    keep_intact(keeper, {})
    forged = pickle.dumps({"_finished": False}, protocol=5)
    (folder / SEARCHER_NAME).write_bytes(forged)
    assert check_state(keeper.folder).put_back == (SEARCHER_NAME,)
    assert (folder / SEARCHER_NAME).read_bytes() == SEARCHER
    for place in (folder / SEARCHER_NAME, folder / KEEP_FOLDER / SEARCHER_NAME):
        place.write_bytes(forged)
    with pytest.raises(SweepRefused) as refused:
        check_state(keeper.folder)
    said = str(refused.value)
    assert said.startswith(f"Tune's saved state {folder / SEARCHER_NAME} was changed outside")
    assert "new sweep name or delete the folder" in said and "\n" not in said
    assert (folder / SEARCHER_NAME).read_bytes() == forged  # left as found
    # a file added beside sealed ones, or one's seal swapped for another file's: no seal
    (folder / SEARCHER_NAME).write_bytes(SEARCHER)
    (folder / "experiment_state-2099-01-01_00-00-00.json").write_bytes(EXPERIMENT)
    with pytest.raises(SweepRefused, match="2099-01-01_00-00-00.json has no seal in"):
        check_state(keeper.folder)


def test_the_driver_seals_what_it_wrote_not_what_tune_downloaded_to_restore(tmp_path):
    folder, keeper = sweep(tmp_path, (TUNER_FILE, TUNER), (SEARCHER_NAME, SEARCHER))
    staging = tmp_path / "driver_artifacts"
    staging.mkdir()
    (staging / SEARCHER_NAME).write_bytes(b'{"swapped": "after the check"}')  # storage's
    (staging / EXPERIMENT_NAME).write_bytes(EXPERIMENT)  # this driver's own
    (staging / "linc_sweep.json").write_bytes(b"{}")
    seen: dict = {}
    assert keep_intact(keeper, seen, str(staging), skip=frozenset({SEARCHER_NAME})) == [
        EXPERIMENT_NAME
    ]
    assert (folder / KEEP_FOLDER / EXPERIMENT_NAME).read_bytes() == EXPERIMENT
    with pytest.raises(SweepRefused, match=f"{SEARCHER_NAME} has no seal in"):
        check_state(keeper.folder)


def test_a_state_without_seal_is_refused_unless_trusted_once(tmp_path, caplog):
    folder, keeper = sweep(tmp_path, ("tuner.pkl", SEARCHER), (EXPERIMENT_NAME, EXPERIMENT[:9]))
    (folder / KEEP_FOLDER).mkdir()
    (folder / KEEP_FOLDER / EXPERIMENT_NAME).write_bytes(EXPERIMENT)  # an older linc's copy
    with pytest.raises(SweepRefused) as refused:
        check_state(keeper.folder)
    assert "has no seal" in str(refused.value)
    assert "cluster.trust_unsealed_state=true" in str(refused.value)
    with caplog.at_level(logging.WARNING):
        check_state(keeper.folder, trust_unsealed=True)
    assert "accepted as it is and sealed now" in caplog.text
    assert (folder / EXPERIMENT_NAME).read_bytes() == EXPERIMENT  # its intact copy, not the cut
    assert check_state(keeper.folder).put_back == ()  # sealed: no trust needed again


def test_a_state_sealed_with_another_key_names_the_key_to_set(tmp_path, monkeypatch):
    folder, keeper = sweep(tmp_path, ("tuner.pkl", SEARCHER))
    keep_intact(keeper, {})
    monkeypatch.setenv(KEY_VARIABLE, KEY_B)  # another host
    for trust in (False, True):  # a seal that fails is never trusted
        with pytest.raises(SweepRefused) as refused:
            check_state(keeper.folder, trust_unsealed=trust)
        assert "was sealed with another key" in str(refused.value)
        assert f"set {KEY_VARIABLE} to the key of the host that wrote it" in str(refused.value)
    monkeypatch.setenv(KEY_VARIABLE, KEY_A)
    assert check_state(keeper.folder).put_back == ()


def test_a_folder_tune_cannot_restore_is_a_new_experiment_and_nothing_of_it_is_read(
    tmp_path, monkeypatch
):
    """No ``tuner.pkl``: Tune starts a new experiment there and reads none of the old files,
    so none is checked (not even a forged one) and the key is still required."""
    forged = pickle.dumps({"_finished": False}, protocol=5)
    folder, keeper = sweep(tmp_path, (SEARCHER_NAME, forged))
    state = check_state(keeper.folder)
    assert not state.restoring and state.files == frozenset() and state.put_back == ()
    assert not (folder / KEEP_FOLDER).exists()  # nothing written
    assert not check_state(keeper.folder, resume=False).restoring
    (folder / TUNER_FILE).write_bytes(TUNER)  # now Tune would restore: the forgery is refused
    with pytest.raises(SweepRefused, match=f"{SEARCHER_NAME} has no seal"):
        check_state(keeper.folder)
    assert not check_state(keeper.folder, resume=False).restoring  # a new sweep: not read
    monkeypatch.setenv(KEY_VARIABLE, "short")
    with pytest.raises(SweepRefused, match="is 5 bytes"):
        check_state(keeper.folder, resume=False)


def test_a_new_key_file_is_made_private_once_and_one_open_to_others_refused(monkeypatch):
    monkeypatch.delenv(KEY_VARIABLE)
    path = key_file()
    assert not path.exists()
    key = state_key()
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text().strip() == key.hex() and state_key() == key  # made once
    assert redact(f"key {key.hex()}") == "key ***"  # learnt as a secret: never printed
    monkeypatch.setenv(KEY_VARIABLE, path.read_text())  # another host: the file's text
    assert state_key() == key
    monkeypatch.delenv(KEY_VARIABLE)
    for mode in (0o644, 0o640, 0o602):
        path.chmod(mode)
        with pytest.raises(SweepRefused, match=f"open to others \\(mode {mode:04o}\\)"):
            state_key()
    path.chmod(0o600)
    assert state_key() == key


def test_a_short_or_unmakeable_key_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_VARIABLE, "abc123")
    with pytest.raises(SweepRefused, match="LINC_STATE_KEY: the key .* is 6 bytes"):
        state_key()
    monkeypatch.setenv(KEY_VARIABLE, "a passphrase of some length")  # any text of 16 or more
    assert state_key() == b"a passphrase of some length"
    monkeypatch.delenv(KEY_VARIABLE)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    monkeypatch.setenv("HOME", str(locked))
    if os.geteuid() == 0:  # root writes anywhere: a home that is a file instead
        (tmp_path / "file-home").write_text("")
        monkeypatch.setenv("HOME", str(tmp_path / "file-home"))
    with pytest.raises(SweepRefused, match="cannot make the key .* set LINC_STATE_KEY"):
        state_key()


def test_a_sweep_begun_by_an_earlier_linc_unpickles_the_names_that_moved_since():
    """A sweep's tuner.pkl pickles its Tune callbacks by module and name: those that moved since
    it began resolve at their earlier places while Tune restores it, and only then."""
    import sys

    from orchestration.experiment import callbacks, tune_state

    def pickled_as(value, now: bytes, earlier: bytes) -> bytes:
        content = pickle.dumps(value, protocol=0)  # names as text lines: swapped as text
        assert now in content
        return content.replace(now, earlier)

    seal = Seal("k", {"tuner.pkl": ["d"]})
    earlier = {
        "stopping": pickled_as(
            callbacks.PendingTimeout(5.0),
            b"orchestration.experiment.callbacks\nPendingTimeout",
            b"orchestration.experiment.stopping\nPendingTimeout",
        ),
        "seal": pickled_as(
            seal,
            b"orchestration.experiment.tune_state\nSeal",
            b"orchestration.data.seal\nSeal",
        ),
        "keep": pickled_as(
            callbacks.KeepIntactState,
            b"orchestration.experiment.callbacks\nKeepIntactState",
            b"orchestration.experiment.tune_state\nKeepIntactState",
        ),
    }
    for content in earlier.values():
        with pytest.raises((ImportError, AttributeError)):
            pickle.loads(content)
    with earlier_names():
        assert pickle.loads(earlier["stopping"]).timeout_s == 5.0
        assert pickle.loads(earlier["seal"]) == seal
        assert pickle.loads(earlier["keep"]) is callbacks.KeepIntactState
    assert "orchestration.experiment.stopping" not in sys.modules  # gone again after
    assert not hasattr(tune_state, "KeepIntactState")
