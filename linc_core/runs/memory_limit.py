"""How much memory this process may use: the machine's, or its control group's limit if less.

A container (Docker's ``--memory``, a Kubernetes pod's ``resources.limits.memory``, a Slurm job's
cgroup) sees the host's physical memory in ``sysconf``, but the kernel kills it at the limit of
its control group. So the limit is read from the cgroup files of this process, version 2
(``memory.max``) or version 1 (``memory.limit_in_bytes``), along its path and every ancestor up
to the mount (a parent's limit binds its children), and the least of these and the physical
memory is what a run is held against.

Where the files cannot be read or parsed, the physical memory stands: the check this feeds is
an early refusal, not a guarantee.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")
# Version 1 reports "no limit" as LONG_MAX rounded down to a page; anything this large is none.
UNLIMITED_V1 = 1 << 62


class MemoryLimit(NamedTuple):
    """``size`` bytes, and where the bound comes from (``"machine"`` or ``"cgroup"``)."""

    size: int
    source: str

    def describe(self) -> str:
        """``this machine has`` or ``this process's cgroup allows`` (then the size)."""
        return "this machine has" if self.source == "machine" else "this process's cgroup allows"


def physical_memory_bytes() -> int:
    """The machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_limit(
    cgroup_file: Path = PROC_CGROUP, mountinfo_file: Path = PROC_MOUNTINFO
) -> MemoryLimit:
    """The memory this process may use: its cgroup's limit where one is set and less than
    the physical memory, else the physical memory."""
    physical = physical_memory_bytes()
    limit = cgroup_memory_limit(cgroup_file, mountinfo_file)
    if limit is not None and limit < physical:
        return MemoryLimit(limit, "cgroup")
    return MemoryLimit(physical, "machine")


def cgroup_memory_limit(
    cgroup_file: Path = PROC_CGROUP, mountinfo_file: Path = PROC_MOUNTINFO
) -> int | None:
    """The least memory limit (bytes) set on this process's cgroup or an ancestor, version 1
    or 2; None when none is set or the files cannot be read."""
    limits = [
        limit
        for cgroup in memory_cgroups(cgroup_file, mountinfo_file)
        for limit in _limits_upwards(cgroup)
    ]
    return min(limits) if limits else None


class MemoryCgroup(NamedTuple):
    """A memory cgroup: its folder, its hierarchy's mount point, the name of its limit file
    (``memory.max``, version 2; ``memory.limit_in_bytes``, version 1)."""

    directory: Path
    mount_point: Path
    limit_file: str


def memory_cgroups(
    cgroup_file: Path = PROC_CGROUP, mountinfo_file: Path = PROC_MOUNTINFO
) -> list[MemoryCgroup]:
    """The memory cgroups this process belongs to (one per mounted hierarchy); empty when the
    files cannot be read.

    Args:
        cgroup_file: ``/proc/self/cgroup`` (``ID:CONTROLLERS:PATH`` lines; version 2 is
            ``0::PATH``).
        mountinfo_file: ``/proc/self/mountinfo``, where the hierarchies are mounted.
    """
    try:
        memberships = cgroup_file.read_text().splitlines()
        mounts = _cgroup_mounts(mountinfo_file.read_text().splitlines())
    except (OSError, UnicodeDecodeError):
        return []
    cgroups = []
    for line in memberships:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            kind, limit_file = "cgroup2", "memory.max"
        elif "memory" in controllers.split(","):
            kind, limit_file = "cgroup", "memory.limit_in_bytes"
        else:
            continue
        for root, mount_point in mounts.get(kind, []):
            directory = _directory(root, mount_point, path)
            cgroups.append(MemoryCgroup(directory, mount_point, limit_file))
    return cgroups


def _cgroup_mounts(lines: list[str]) -> dict[str, list[tuple[str, Path]]]:
    """``{"cgroup2": [(root, mount point)], "cgroup": [...]}``, version 1's memory ones only.

    A mountinfo line: ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS...] - FSTYPE SOURCE
    SUPER_OPTIONS``; paths escape spaces and the like as octal (``\\040``).
    """
    mounts: dict[str, list[tuple[str, Path]]] = {}
    for line in lines:
        left, separator, right = line.partition(" - ")
        fields, described = left.split(), right.split()
        if not separator or len(fields) < 5 or len(described) < 3:
            continue
        fstype, options = described[0], described[2].split(",")
        if fstype == "cgroup2" or (fstype == "cgroup" and "memory" in options):
            mounts.setdefault(fstype, []).append((_unescape(fields[3]), Path(_unescape(fields[4]))))
    return mounts


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), field)


def _directory(root: str, mount_point: Path, path: str) -> Path:
    """Where the cgroup ``path`` lies under a mount of the hierarchy's ``root``: below it when
    ``path`` is inside ``root``, else the mount point itself (a container that mounts its own
    cgroup as the root while ``/proc`` names the host's path)."""
    root = root.rstrip("/")
    if path == root or path.startswith(root + "/"):
        return mount_point / path[len(root) :].lstrip("/")
    return mount_point


def _limits_upwards(cgroup: MemoryCgroup) -> list[int]:
    """The limits set on ``cgroup`` and each of its ancestors up to the mount point."""
    limits = []
    current = cgroup.directory
    while True:
        value = _read_limit(current / cgroup.limit_file)
        if value is not None:
            limits.append(value)
        if current == cgroup.mount_point or cgroup.mount_point not in current.parents:
            return limits
        current = current.parent


def _read_limit(file: Path) -> int | None:
    try:
        text = file.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit():  # "max" (version 2's no limit), or nothing readable
        return None
    value = int(text)
    return value if 0 < value < UNLIMITED_V1 else None


__all__ = [
    "MemoryCgroup",
    "MemoryLimit",
    "cgroup_memory_limit",
    "memory_cgroups",
    "memory_limit",
    "physical_memory_bytes",
]
