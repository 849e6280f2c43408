"""A host process's /proc/<pid>/cgroup file (core.cgroup_owner names its container)."""

from __future__ import annotations

from pathlib import Path

from drgpu.host.files import read_system


def read_cgroup(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The cgroup file of a process, or None when it is gone or not visible from here."""
    return read_system(proc / str(pid) / "cgroup")
