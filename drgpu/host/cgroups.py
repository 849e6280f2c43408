"""A host process's /proc/<pid>/cgroup file (core.cgroup_owner names its container)."""

from __future__ import annotations

from pathlib import Path


def read_cgroup(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The cgroup file of a process, or None when it is gone or not visible from here."""
    try:
        return (proc / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
