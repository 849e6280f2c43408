"""drgpu/host/enginelock.py: what /proc says of a process the lock names."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from drgpu.host import enginelock, signals
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


def test_machine_id_is_the_first_non_empty_file(tmp_path: Path) -> None:
    empty, dbus = tmp_path / "machine-id", tmp_path / "dbus-machine-id"
    empty.write_text("\n")
    dbus.write_text("0123abcd\n")
    assert enginelock.machine_id((tmp_path / "absent", empty, dbus)) == "0123abcd"
    assert enginelock.machine_id((empty,)) == ""


def test_booted_is_btime_in_the_locks_format(tmp_path: Path) -> None:
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3\nbtime 1767225600\nprocesses 9\n")
    assert enginelock.booted(proc_stat) == "2026-01-01 00:00:00Z"
    assert enginelock.booted(tmp_path / "absent") == ""
    now = datetime.now(timezone.utc).strftime(enginelock.SINCE_FORMAT)
    assert "" < enginelock.this_process().booted <= now


def test_a_signal_while_the_lock_is_made_comes_once_it_is_kept_and_removes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    removed: list[str] = []

    def create(labels: object) -> str:  # the engine makes the lock while Ctrl-C comes
        signal.raise_signal(signal.SIGINT)
        return "lock-1"

    monkeypatch.setattr(enginelock, "_create_lock", create)
    monkeypatch.setattr(enginelock, "_remove_lock", removed.append)
    before = {signum: signal.getsignal(signum) for signum in signals.CAUGHT}
    try:
        with (
            signals.caught(),
            pytest.raises(signals.Interrupted),
            enginelock.engine_lock(
                "up", "p", on_wait=print, on_stale=print, timeout_s=1, volumes_before=tuple
            ),
        ):
            pytest.fail("the block ran")
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert removed == ["lock-1"]
