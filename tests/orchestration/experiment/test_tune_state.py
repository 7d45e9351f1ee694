"""orchestration.experiment.tune_state: Tune's saved state cut short by a full storage is put
back from its last intact copy before a re-run restores."""

from __future__ import annotations

import json
import logging
import pickle

import pyarrow.fs as pafs

from orchestration.experiment.tune_state import KEEP_FOLDER, is_intact, keep_intact, repair

SEARCHER = pickle.dumps({"_finished": True, "_total_samples": 12, "uuid": "a0e93_"}, protocol=5)
EXPERIMENT = json.dumps({"trial_data": [['{"trial_id": "a0e93_00000"}', "{}"]]}).encode()


def test_whole_files_are_intact_and_any_cut_is_not():
    assert is_intact(SEARCHER) and is_intact(EXPERIMENT)
    for cut in (0, 1, len(SEARCHER) // 2, len(SEARCHER) - 1):
        assert not is_intact(SEARCHER[:cut])
    for cut in (0, len(EXPERIMENT) // 2, len(EXPERIMENT) - 1):
        assert not is_intact(EXPERIMENT[:cut])


def test_a_cut_state_file_is_put_back_from_its_kept_copy(tmp_path, caplog):
    fs = pafs.LocalFileSystem()
    searcher = tmp_path / "basic-variant-state-2026-11-25_02-50-57.json"
    experiment = tmp_path / "experiment_state-2026-11-25_02-50-57.json"
    searcher.write_bytes(SEARCHER)
    experiment.write_bytes(EXPERIMENT)
    (tmp_path / "linc_lease.json").write_bytes(b"{")  # linc's own: never Tune's state
    (tmp_path / ".validate_storage_marker").write_bytes(b"")  # Ray's empty marker
    seen: dict = {}
    assert keep_intact(fs, str(tmp_path), seen) == 2
    assert keep_intact(fs, str(tmp_path), seen) == 0  # unchanged: nothing read again
    # the storage fills up while Tune copies its state: one file emptied, one cut in half
    searcher.write_bytes(b"")
    experiment.write_bytes(EXPERIMENT[:10])
    assert keep_intact(fs, str(tmp_path), seen) == 0  # damaged copies never replace good ones
    assert (tmp_path / KEEP_FOLDER / searcher.name).read_bytes() == SEARCHER
    with caplog.at_level(logging.WARNING):
        assert sorted(repair(fs, str(tmp_path))) == sorted([searcher.name, experiment.name])
    assert searcher.read_bytes() == SEARCHER and experiment.read_bytes() == EXPERIMENT
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 2 and all("put back its last intact copy" in m for m in told)
    assert any(f"{searcher} was damaged (cut short, 0 bytes" in m for m in told)
    assert repair(fs, str(tmp_path)) == []  # nothing left to mend


def test_a_cut_file_without_a_copy_is_named(tmp_path, caplog):
    fs = pafs.LocalFileSystem()
    state = tmp_path / "experiment_state-2026-11-25_02-50-57.json"
    state.write_bytes(EXPERIMENT[:7])
    with caplog.at_level(logging.WARNING):
        assert repair(fs, str(tmp_path)) == []
    assert f"{state} is damaged (cut short, 7 bytes) and has no intact copy" in caplog.text
