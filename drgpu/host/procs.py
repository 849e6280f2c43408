"""A host process's cgroup file (core.cgroup_owner names its container), command line and
user, from /proc."""

from __future__ import annotations

import pwd
from pathlib import Path

from drgpu.core.facts import ProcessFacts
from drgpu.host.files import read_system


def read_cgroup(pid: int, proc: Path = Path("/proc")) -> str | None:
    """The cgroup file of a process, or None when it is gone or not visible from here."""
    return read_system(proc / str(pid) / "cgroup")


def read_process(pid: int, proc: Path = Path("/proc")) -> ProcessFacts | None:
    """The command line and user of a process, or None when it is gone or not visible."""
    folder = proc / str(pid)
    raw = read_system(folder / "cmdline")
    try:
        uid = folder.stat().st_uid
    except OSError:
        return None
    if raw is None:
        return None
    argv = tuple(part for part in raw.split("\0") if part)
    if not argv:  # a kernel thread, or a zombie: its name is all there is
        comm = (read_system(folder / "comm") or "?").strip()
        argv = (f"[{comm}]",)
    return ProcessFacts(argv=argv, user=user_name(uid))


def process_key(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Which process holds `pid` now (its /proc folder's inode: a PID reused gets another),
    or None when it is gone."""
    try:
        return (proc / str(pid)).stat().st_ino
    except OSError:
        return None


def user_name(uid: int) -> str:
    """The name of a user id on this host, or the number where it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
