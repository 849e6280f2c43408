"""drgpu/host/cgroups.py: a process's cgroup lines, read from /proc."""

from __future__ import annotations

import os
from pathlib import Path

from drgpu.host.cgroups import read_cgroup
from tests.unit.core.test_cgroup_owner import DOCKER_V2_SYSTEMD


def test_read_cgroup_of_this_process_and_of_a_missing_one(tmp_path: Path) -> None:
    assert read_cgroup(os.getpid()) is not None
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(DOCKER_V2_SYSTEMD)
    assert read_cgroup(42, proc=tmp_path) == DOCKER_V2_SYSTEMD
    assert read_cgroup(43, proc=tmp_path) is None
