"""orchestration.data.state_key: the key sealing Tune's state is masked wherever it is printed,
from the environment in every process and from the key file once read (its sealing and its
refusals: tests/orchestration/experiment/test_tune_state.py)."""

from __future__ import annotations

import os

from linc_core.utils.secrets import MASK, is_secret_variable
from orchestration.data.state_key import KEY_VARIABLE
from tests.conftest import fresh_python

PRINT_AFTER_READING = (
    "import os\n"
    "from linc_core.utils.secrets import redact\n"
    "from orchestration.data.state_key import key_file, state_key\n"
    "key = state_key()\n"
    "text = os.environ.get('LINC_STATE_KEY') or key_file().read_text().strip()\n"
    "for form in (text, key.hex(), key.hex().upper()):\n"
    "    print(redact(f'tracking.experiment={form}'))\n"
)


def test_the_key_variable_is_a_secret_of_every_process() -> None:
    assert is_secret_variable(KEY_VARIABLE)


def test_the_key_files_text_is_masked_once_read(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    out = fresh_python(PRINT_AFTER_READING)
    text = (tmp_path / ".config" / "linc" / "state.key").read_text().strip()
    assert len(text) == 64 and text not in out and text.upper() not in out, out
    assert out.split() == [f"tracking.experiment={MASK}"] * 3


def test_a_passphrase_key_is_masked_as_given_and_as_hex(tmp_path, monkeypatch) -> None:
    passphrase = "correct horse battery staple"
    monkeypatch.setenv(KEY_VARIABLE, passphrase)
    monkeypatch.setenv("HOME", str(tmp_path))
    out = fresh_python(PRINT_AFTER_READING)
    assert passphrase not in out and passphrase.encode().hex() not in out, out
    assert out.splitlines() == [f"tracking.experiment={MASK}"] * 3
    assert not (tmp_path / ".config").exists() and os.environ[KEY_VARIABLE] == passphrase
