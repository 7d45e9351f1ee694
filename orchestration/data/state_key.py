"""The key that seals what this user's driver writes to shared storage: an HMAC key nobody
else has.

Whoever can write a sweep's storage can put a file there that a later reader unpickles (Ray
Tune's saved state is cloudpickle: reading it runs code). A pickle cannot be made safe by
allow-listing what it names (cloudpickle rebuilds a function from its code objects), so the
defence is integrity: each file linc will read back is accepted only when its bytes carry a
seal, an HMAC-SHA256 made with this key from the bytes the driver itself wrote, never from what
storage gives back later (:mod:`orchestration.experiment.tune_state`).

The key (:func:`state_key`) is ``$LINC_STATE_KEY`` when set (hex of at least 16 bytes, or any
text of at least 16 characters), else the per-user key file ``~/.config/linc/state.key``: 32
random bytes as hex, made ``0600`` on first use (atomically: two processes starting at once
share one key). A key file others can read or write, or another user's, is refused in one
line. The key is never written to storage nor logged: ``$LINC_STATE_KEY`` is masked by
:func:`~linc_core.utils.secrets.redact` in every process, also one that never calls
:func:`state_key` (a trial: its name ends in ``_KEY``), and the key read here, the file's text
and its hex, is learnt as a secret (:func:`~linc_core.utils.secrets.learn_secrets`), so any
print of it is masked. Only the driver reads the key (it seals and checks the state): workers
need not have it. A sweep moved to
another host is resumed there with ``LINC_STATE_KEY`` set to the key (the file's text) of the
host that wrote it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path

from linc_core.utils.secrets import learn_secrets
from orchestration.failures import SweepRefused

KEY_VARIABLE = "LINC_STATE_KEY"
KEY_BYTES = 32  # a new key file's random bytes
MIN_KEY_BYTES = 16
_HEX_KEY = re.compile(r"(?:[0-9a-fA-F]{2}){16,}")


def key_file() -> Path:
    """The per-user key file: ``~/.config/linc/state.key``."""
    return Path.home() / ".config" / "linc" / "state.key"


def state_key() -> bytes:
    """This user's sealing key: ``$LINC_STATE_KEY``, else the key file (made on first use).

    Raises:
        SweepRefused: the variable is too short, or the key file is readable or writable by
            others, owned by another user, unreadable, or cannot be made.
    """
    given = os.environ.get(KEY_VARIABLE)
    if given is not None:
        return _parse_key(given, KEY_VARIABLE)
    path = key_file()
    if not path.exists():
        _create_key_file(path)
    return _parse_key(_read_key_file(path), str(path))


def key_id(key: bytes) -> str:
    """A name of ``key`` that reveals nothing of it (16 hex digits)."""
    return hmac.new(key, b"linc state key id", hashlib.sha256).hexdigest()[:16]


def _parse_key(text: str, source: str) -> bytes:
    text = text.strip()
    key = bytes.fromhex(text) if _HEX_KEY.fullmatch(text) else text.encode()
    if len(key) < MIN_KEY_BYTES:
        raise SweepRefused(
            f"{source}: the key that seals Tune's state is {len(key)} bytes; give at least "
            f"{MIN_KEY_BYTES} (e.g. the text of another host's ~/.config/linc/state.key)"
        )
    learn_secrets({"secret": text, "secret_hex": key.hex()})  # any print of it is masked
    return key


def _read_key_file(path: Path) -> str:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise SweepRefused(
            f"{path}: cannot read the key that seals Tune's state ({err.strerror}); fix it or "
            f"set {KEY_VARIABLE}"
        ) from None
    with os.fdopen(descriptor, "r") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid():
            raise SweepRefused(
                f"{path}: the key that seals Tune's state belongs to user id {info.st_uid}, not "
                f"{os.getuid()}; delete it (a new one is made) or set {KEY_VARIABLE}"
            )
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise SweepRefused(
                f"{path}: the key that seals Tune's state is open to others (mode {mode:04o}): "
                f"anyone who reads it can forge a sweep's state; run chmod 600 {path} (and "
                "delete it, a new one is made, if others may have read it)"
            )
        return handle.read()


def _create_key_file(path: Path) -> None:
    """Write a new random key to ``path`` (``0600``) unless another process did first."""
    temporary = path.parent / f".state.key.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES).hex() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process made one meanwhile: its
            os.link(temporary, path)
    except OSError as err:
        raise SweepRefused(
            f"{path}: cannot make the key that seals Tune's state ({err.strerror}); set "
            f"{KEY_VARIABLE} to a key of at least {MIN_KEY_BYTES} bytes"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


__all__ = ["KEY_VARIABLE", "MIN_KEY_BYTES", "key_file", "key_id", "state_key"]
