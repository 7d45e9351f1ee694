"""orchestration.data.storage: telling storage out of space from other failures."""

from __future__ import annotations

import errno
import sqlite3

from orchestration.data.storage import is_out_of_space


def _raised_from(cause: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as err:
            raise outer from err
    except BaseException as raised:  # noqa: BLE001 - the chained error itself is the value
        return raised


def test_out_of_space_is_read_from_errno_text_and_cause():
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device", "/x/latest.pt"))
    # pyarrow's upload: errno 28 in the text only
    assert is_out_of_space(OSError("Error writing bytes to file. Detail: [errno 28] No space "
                                   "left on device"))  # fmt: skip
    full = sqlite3.OperationalError("database or disk is full")
    assert is_out_of_space(_raised_from(full, RuntimeError("SQLAlchemy wrapped it")))
    assert not is_out_of_space(OSError(errno.ECONNREFUSED, "Connection refused"))
    assert not is_out_of_space(sqlite3.OperationalError("database is locked"))
