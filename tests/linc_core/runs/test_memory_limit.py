"""The memory a process may use: its cgroup's limit (version 1 or 2, the least along its path)
where one is set below the machine's memory, else the machine's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from linc_core.runs.memory_limit import (
    MemoryLimit,
    cgroup_memory_limit,
    memory_limit,
    physical_memory_bytes,
)

GIB = 1 << 30


def _proc_files(tmp_path: Path, membership: str, mount: str) -> tuple[Path, Path]:
    """``/proc/self/cgroup`` and ``/proc/self/mountinfo`` as the kernel writes them."""
    cgroup_file, mountinfo_file = tmp_path / "cgroup", tmp_path / "mountinfo"
    cgroup_file.write_text(f"1:cpu:/\n{membership}\n")
    mountinfo_file.write_text(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        f"{mount}\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    )
    return cgroup_file, mountinfo_file


def test_version_2_takes_the_least_limit_along_the_path(tmp_path) -> None:
    """A pod's limit on the parent binds the container's cgroup below it, whose own is "max"."""
    root = tmp_path / "unified"
    (root / "kubepods" / "pod1" / "box").mkdir(parents=True)
    (root / "kubepods" / "memory.max").write_text("max\n")
    (root / "kubepods" / "pod1" / "memory.max").write_text(f"{3 * GIB}\n")
    (root / "kubepods" / "pod1" / "box" / "memory.max").write_text("max\n")
    files = _proc_files(
        tmp_path, "0::/kubepods/pod1/box", f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw"
    )
    assert cgroup_memory_limit(*files) == 3 * GIB
    (root / "kubepods" / "pod1" / "box" / "memory.max").write_text(f"{GIB}\n")
    assert cgroup_memory_limit(*files) == GIB
    assert memory_limit(*files) == MemoryLimit(GIB, "cgroup")


def test_version_1_inside_a_container_whose_mount_is_its_own_cgroup(tmp_path) -> None:
    """Docker mounts the container's cgroup as the hierarchy's root: ``/proc`` names the host
    path (``/docker/abc``), found at the mount point itself; the unlimited value (LONG_MAX,
    page-rounded) is no limit."""
    mount = tmp_path / "memory"
    mount.mkdir()
    (mount / "memory.limit_in_bytes").write_text("536870912\n")
    line = f"35 31 0:32 /docker/abc {mount} rw,relatime - cgroup cgroup rw,memory"
    files = _proc_files(tmp_path, "4:memory:/docker/abc", line)
    assert cgroup_memory_limit(*files) == 512 << 20
    files = _proc_files(tmp_path, "4:memory:/elsewhere", line)
    assert cgroup_memory_limit(*files) == 512 << 20
    (mount / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_memory_limit(*files) is None


def test_a_mount_point_with_a_space_is_unescaped(tmp_path) -> None:
    mount = tmp_path / "cgroup fs"
    (mount / "job").mkdir(parents=True)
    (mount / "job" / "memory.max").write_text(f"{2 * GIB}\n")
    escaped = str(mount).replace(" ", "\\040")
    files = _proc_files(tmp_path, "0::/job", f"30 23 0:26 / {escaped} rw - cgroup2 cgroup2 rw")
    assert cgroup_memory_limit(*files) == 2 * GIB


def test_unreadable_or_odd_files_leave_the_machine_memory(tmp_path) -> None:
    """No files, a limit file that is not a number, a limit above the machine's memory."""
    assert cgroup_memory_limit(tmp_path / "none", tmp_path / "none") is None
    assert memory_limit(tmp_path / "none", tmp_path / "none") == MemoryLimit(
        physical_memory_bytes(), "machine"
    )
    root = tmp_path / "unified"
    (root / "job").mkdir(parents=True)
    files = _proc_files(tmp_path, "0::/job", f"30 23 0:26 / {root} rw - cgroup2 cgroup2 rw")
    for text in ["", "12abc", "-5", "0"]:
        (root / "job" / "memory.max").write_text(text)
        assert cgroup_memory_limit(*files) is None, text
    (root / "job" / "memory.max").write_text(str(physical_memory_bytes() + GIB))
    assert memory_limit(*files).source == "machine"


def test_a_process_in_a_limited_cgroup_reads_its_limit(memory_cgroup) -> None:
    """A real cgroup of this kernel, limited to 1 GiB (the kernel kills past it)."""
    script = "from linc_core.runs.memory_limit import memory_limit; print(tuple(memory_limit()))"
    argv = [*memory_cgroup(GIB), sys.executable, "-c", script]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == f"({GIB}, 'cgroup')"
