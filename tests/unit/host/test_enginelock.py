"""drgpu/host/enginelock.py: what /proc says of a process the lock names."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from drgpu.host.enginelock import start_ticks, this_process


def test_this_process_is_alive_and_a_reaped_child_is_not() -> None:
    me = this_process()
    assert start_ticks(me.pid) == me.start_ticks > 0
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert start_ticks(child.pid) is None


def test_a_zombie_counts_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while start_ticks(child.pid) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert Path(f"/proc/{child.pid}").exists()  # not reaped yet
    child.wait()
