"""orchestration.failures: every way a sweep can end unfinished is one of one family, one line
with an exit code; a bug is not (its traceback is what tells it)."""

from __future__ import annotations

import errno

import pytest

from linc_core.utils.secrets import learn_secrets
from linc_core.utils.typed import ConfigError
from orchestration.data.storage import StorageUnavailableError
from orchestration.failures import (
    SweepError,
    SweepInterrupted,
    SweepRefused,
    SweepStopped,
    TrialFailed,
    one_line,
    refused_input,
    sweep_failure,
)


def test_exit_codes_and_config_errors() -> None:
    assert SweepRefused("x").exit_code == 2 and isinstance(SweepRefused("x"), ConfigError)
    assert SweepStopped("x").exit_code == 1 and TrialFailed("x").exit_code == 1
    assert SweepInterrupted("x").exit_code == 143
    assert all(issubclass(k, SweepError) for k in (SweepRefused, SweepStopped, TrialFailed))


def test_what_ends_a_sweep_is_mapped_to_the_family(tmp_path) -> None:
    inner = SweepStopped("no trial could be placed for 600 s")
    try:  # Tune wraps what a callback raises
        try:
            raise inner
        except SweepStopped as err:
            raise RuntimeError("Tune: the controller failed") from err
    except RuntimeError as wrapped:
        assert sweep_failure(wrapped, "s", str(tmp_path)) is inner
    refused = sweep_failure(ConfigError("search.storage: required"), "s", None)
    assert isinstance(refused, SweepRefused) and str(refused) == "search.storage: required"
    full = OSError(errno.ENOSPC, "No space left on device")
    stopped = sweep_failure(full, "s", str(tmp_path))
    assert isinstance(stopped, SweepStopped)
    assert str(stopped).startswith(f"s: the storage {tmp_path} is out of space")
    gone = StorageUnavailableError("could not read s3://b/s/x after 6 attempts: SlowDown")
    assert str(sweep_failure(gone, "s", None)).endswith("; re-run the same command once mended")
    assert isinstance(sweep_failure(KeyboardInterrupt(), "s", None), SweepInterrupted)
    assert sweep_failure(ZeroDivisionError("a bug"), "s", None) is None
    assert sweep_failure(None, "s", None) is None


def test_one_line_is_the_last_line_masked_and_cut() -> None:
    learn_secrets("postgresql://linc:hunter2-secret@db/mlflow")
    error = ValueError("Traceback ...\n  File x\nValueError: postgresql://linc:hunter2-secret@db")
    assert one_line(error) == "ValueError: postgresql://linc:***@db"
    assert one_line(ValueError("x" * 300), limit=20) == "x" * 17 + "..."
    with pytest.raises(SweepRefused):
        raise SweepRefused("nothing ran")


def test_refused_input_is_found_through_rays_wrapping_and_exception_chains() -> None:
    from ray.exceptions import RayTaskError

    from linc_core.instances.parquet import DatasetSchemaError

    shard = DatasetSchemaError("data/shard-00000.parquet", "sha256", "ab12", "differs")
    wrapped = RayTaskError("train", "Traceback ...", shard)
    assert refused_input(wrapped) and refused_input(wrapped.as_instanceof_cause())
    assert refused_input(ConfigError("train.epochs: -1"))
    try:
        try:
            raise shard
        except ValueError as err:
            raise RuntimeError("while loading") from err
    except RuntimeError as outer:
        assert refused_input(outer)
    assert not refused_input(RayTaskError("train", "Traceback ...", OSError("reset by peer")))
    assert not refused_input(ValueError("a bug")) and not refused_input(None)
    loop = RuntimeError("a")
    loop.__context__ = RuntimeError("b")
    loop.__context__.__context__ = loop  # a cycle ends the walk
    assert not refused_input(loop)
