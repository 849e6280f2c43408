"""drgpu/host/procs.py: a process's cgroup lines, command line and user, read from /proc."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path

from drgpu.host.procs import process_key, read_cgroup, read_process, user_name
from tests.unit.core.test_cgroup_owner import DOCKER_V2_SYSTEMD


def test_this_process_has_its_command_line_and_its_user() -> None:
    facts = read_process(os.getpid())
    assert facts is not None
    assert facts.argv[0] == sys.argv[0] or "python" in facts.argv[0]
    assert facts.user == pwd.getpwuid(os.getuid()).pw_name


def test_a_missing_process_a_kernel_thread_and_an_unnamed_user(tmp_path: Path) -> None:
    assert read_process(43, proc=tmp_path) is None
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cmdline").write_bytes(b"")
    (tmp_path / "42" / "comm").write_text("kworker/0:1\n")
    facts = read_process(42, proc=tmp_path)
    assert facts is not None and facts.argv == ("[kworker/0:1]",)
    assert user_name(4_000_000_000) == "4000000000"


def test_read_cgroup_of_this_process_and_of_a_missing_one(tmp_path: Path) -> None:
    assert read_cgroup(os.getpid()) is not None
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(DOCKER_V2_SYSTEMD)
    assert read_cgroup(42, proc=tmp_path) == DOCKER_V2_SYSTEMD
    assert read_cgroup(43, proc=tmp_path) is None


def test_a_process_key_is_its_proc_folder_while_it_lives(tmp_path: Path) -> None:
    assert process_key(os.getpid()) == process_key(os.getpid()) is not None
    assert process_key(43, proc=tmp_path) is None
