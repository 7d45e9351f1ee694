"""A run writer's saved journal read back from a checkpoint: nothing in it is trusted.

A trial's checkpoint carries the records its run had not yet received (``tracking_journal.json``)
and their artifact files (``tracking_artifacts/``); the trial's next attempt and the sweep's
driver deliver them. Whoever can write the sweep's storage can write that file, so reading it
back checks every record before anything is done with it: a known operation with values of its
kind; an artifact's file and name one path component each (no '/', no '..', no NUL) and its
folder plain names; the journal and every artifact file opened without following a link, the
artifacts' folder too. A record that fails is dropped with one warning naming the journal. The
run the records go to is never the journal's to say: the writer finds its run by its own key
(:meth:`orchestration.tracking.writer.RunWriter.start`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from linc_core.utils.files import FileRefusedError, is_plain_name, open_regular_file

logger = logging.getLogger(__name__)

JOURNAL_FILE = "tracking_journal.json"
JOURNAL_ARTIFACTS = "tracking_artifacts"
MAX_JOURNAL_BYTES = 64 * 1024**2
STATUSES = frozenset({"RUNNING", "FINISHED", "FAILED", "KILLED"})


def read_journal(folder: str | os.PathLike[str], spool: Path) -> dict[str, Any] | None:
    """The journal saved in ``folder``, its valid records' artifact files copied into
    ``spool``; None when there is none or it cannot be read as one."""
    path = Path(folder) / JOURNAL_FILE
    try:
        with open_regular_file(path, max_bytes=MAX_JOURNAL_BYTES, follow_links=False) as f:
            state = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # FileRefusedError and bad JSON are ValueErrors
        logger.warning("tracking journal %s: not read: %s", path, err)
        return None
    if not isinstance(state, dict) or not isinstance(state.get("pending") or [], list):
        logger.warning("tracking journal %s: not read: not a journal", path)
        return None
    records = []
    for record in state.get("pending") or []:
        problem = record_problem(record)
        if problem is None and record["op"] == "artifact":
            problem = _copy_artifact(Path(folder) / JOURNAL_ARTIFACTS, record["file"], spool)
        if problem == "gone":
            continue  # delivered while the journal was saved
        if problem is not None:
            logger.warning("tracking journal %s: a record dropped: %s", path, problem)
            continue
        records.append(record)
    return state | {"pending": records}


def run_description(state: Any, default_name: str) -> tuple[str, dict[str, str]]:
    """(run name, tags) a journal describes its run by (its ``create``), when they are texts;
    else ``default_name`` and none. For a run the trial never made: the writer's own key
    still decides which run it is, and its tags override these."""
    create = state.get("create") if isinstance(state, dict) else None
    create = create if isinstance(create, dict) else {}
    name, tags = create.get("run_name"), create.get("tags")
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        tags = {}
    return (name if isinstance(name, str) and name else default_name), tags


def record_problem(record: Any) -> str | None:
    """Why ``record`` is not one a run writer makes (None: it is)."""
    if not isinstance(record, dict):
        return f"{type(record).__name__}, not a record"
    op = record.get("op")
    if op in ("params", "tags"):
        values = record.get("values")
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            return f"{op}: values are not names and texts"
    elif op == "metrics":
        values = record.get("values")
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and _number(v) for k, v in values.items()
        ):
            return "metrics: values are not names and numbers"
        if not all(_integer(record.get(field)) for field in ("step", "timestamp")):
            return "metrics: step or timestamp is not an integer"
    elif op == "artifact":
        for field in ("file", "name"):
            if not _one_component(record.get(field)):
                return f"artifact {field} {record.get(field)!r}: not one file name"
        folder = record.get("path")
        if folder is not None and not (
            isinstance(folder, str) and all(is_plain_name(part) for part in folder.split("/"))
        ):
            return f"artifact path {folder!r}: not a folder of plain names"
    elif op == "status":
        if record.get("status") not in STATUSES:
            return f"status {record.get('status')!r}: not one of {sorted(STATUSES)}"
    else:
        return f"operation {op!r}: unknown"
    return None


def _copy_artifact(artifacts: Path, name: str, spool: Path) -> str | None:
    """Copy ``artifacts/name`` into the spool, neither the folder nor the file a link."""
    flags = os.O_RDONLY | os.O_NOFOLLOW
    try:
        folder = os.open(artifacts, flags | os.O_DIRECTORY)
    except FileNotFoundError:
        return "gone"
    except OSError as err:
        return f"{artifacts}: {err.strerror or err} (a link is not followed)"
    try:
        try:
            handle = os.open(name, flags | os.O_NONBLOCK, dir_fd=folder)
        except FileNotFoundError:
            return "gone"
        except OSError as err:
            return f"{artifacts / name}: {err.strerror or err} (a link is not followed)"
        with os.fdopen(handle, "rb") as source:
            if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                return f"{artifacts / name}: not a regular file"
            with open(spool / name, "wb") as target:
                shutil.copyfileobj(source, target)
    except (OSError, FileRefusedError) as err:
        return f"{artifacts / name}: {err}"
    finally:
        os.close(folder)
    return None


def _one_component(name: Any) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and name not in (".", "..")
        and not any(c in name for c in "/\\\0")
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["JOURNAL_ARTIFACTS", "JOURNAL_FILE", "read_journal", "record_problem", "run_description"]
