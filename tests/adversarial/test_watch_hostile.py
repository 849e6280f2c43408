"""`status --watch`'s exporters against hostile labels, commands and receivers (issue 29,
items 4 to 6): the violation command keeps running, the InfluxDB writes never lose or hide
points nor hold the watch, the Prometheus endpoint never prints a traceback."""

from __future__ import annotations

import os
import resource
import signal
import sys
import time
import types
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.core.alerts import Alert
from drgpu.core.findings import Finding, Level
from drgpu.host import violation_command
from drgpu.host.violation_command import ViolationCommand
from tests.cli.test_status import a_status


def alert(run_id: str = "0") -> Alert:
    facts = {"run_id": run_id, "service": "sagemaker", "pid": 1234, "gpu_index": 0}
    violation = Finding("pid 1234", Level.FAIL, f"PID 1234 of run {run_id}", None, "stray", facts)
    return Alert(violation, 0.0)


def ran(args: list[str], *alerts: Alert) -> list[str]:
    """What ViolationCommand reported, running `args` for each alert."""
    reports: list[str] = []
    command = ViolationCommand(args, reports.append)
    for each in alerts:
        command.run(each)
    command.close()
    return reports


def test_a_nul_byte_in_a_label_runs_the_command_and_those_after(tmp_path: Path) -> None:
    record = tmp_path / "ran"
    script = f'printf "%s\\n" "$DRGPU_VIOLATION_RUN" >> {record}'
    assert ran(["sh", "-c", script], alert("a\0b"), alert("1")) == []
    assert record.read_text().splitlines() == ["a\\x00b", "1"]


def test_a_child_left_holding_the_output_is_not_waited_for(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    script = f"setsid sleep 60 & echo $! > {pidfile}; echo started"
    started = time.monotonic()
    try:
        assert ran(["sh", "-c", script], alert()) == []
        assert time.monotonic() - started < violation_command.WAIT_AT_END_S
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_the_commands_output_is_bounded_and_its_last_line_reported() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys; sys.stdout.write('x' * 300_000_000); print(); print('boom'); sys.exit(3)"
    reports = ran([sys.executable, "-c", code], alert())
    assert reports == [f"--on-violation: {sys.executable} exited 3: boom"]
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 100


def test_the_rate_limit_holds_when_the_wall_clock_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refresh a minute apart (monotonic), the wall clock an hour back each time: every
    new violation still runs the command."""
    clock = {"wall": 2e9, "monotonic": 1000.0}

    def tick(key: str, step: float) -> float:
        clock[key] += step
        return clock[key]

    fake = types.SimpleNamespace(
        time=lambda: tick("wall", -3600), monotonic=lambda: tick("monotonic", 61)
    )
    monkeypatch.setattr(status, "time", fake)
    handed: list[Alert] = []

    class Recorder:
        def __init__(self, args: Any, report: Any) -> None:
            pass

        run = staticmethod(handed.append)

        def close(self) -> None:
            pass

    monkeypatch.setattr(violation_command, "ViolationCommand", Recorder)
    with ExitStack() as stack:
        sink = status._violation_sink("true", stack)
        for i in range(8):
            sink(a_status(f"GPU-other-{i}"))
    assert len(handed) == 16  # two violations each refresh, all new
