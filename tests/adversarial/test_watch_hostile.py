"""`status --watch`'s exporters against hostile labels, commands and receivers (issue 29,
items 4 to 6): the violation command keeps running, the InfluxDB writes never lose or hide
points nor hold the watch, the Prometheus endpoint never prints a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import tracemalloc
import types
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.core import metrics
from drgpu.core.alerts import Alert
from drgpu.core.findings import Finding, Level
from drgpu.core.metrics import InfluxTarget
from drgpu.host import metrics_export, violation_command
from drgpu.host.metrics_export import InfluxSender, PrometheusEndpoint
from drgpu.host.violation_command import ViolationCommand
from tests.adversarial.test_hostile_labels import labelled
from tests.cli import test_status
from tests.cli.test_status import G0, a_status
from tests.support.metrics_servers import free_port, influxdb, wait_until
from tests.support.runners import Cli

snapshots = test_status.snapshots  # the fixture: each snapshot the CLI takes, in order


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


def test_the_commands_output_is_bounded_and_its_last_line_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the end of a watch waits 5 s for the command: a loaded machine needs longer for 300 MB
    monkeypatch.setattr(violation_command, "WAIT_AT_END_S", 120.0)
    code = "import sys; sys.stdout.write('x' * 300_000_000); print(); print('boom'); sys.exit(3)"
    tracemalloc.start()
    try:
        reports = ran([sys.executable, "-c", code], alert())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert reports == [f"--on-violation: {sys.executable} exited 3: boom"]
    assert peak < 20 * 1024 * 1024


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


# --- --influx ----------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["\\", "a\nb", "x\\"])
@pytest.mark.parametrize("scheme", ["udp", "http"])
def test_a_hostile_label_loses_no_point(run_id: str, scheme: str, tmp_path: Path) -> None:
    """InfluxDB 1.x takes every point, the GPU series too (over UDP a bad line drops the
    whole datagram silently)."""
    failures: list[str] = []
    lines = metrics.line_protocol(metrics.samples(labelled(run_id)), time.time_ns())
    with influxdb(tmp_path) as influx:
        target = (
            InfluxTarget("udp", "127.0.0.1", influx.udp_port)
            if scheme == "udp"
            else metrics.influx_target(influx.write_url)
        )
        sender = InfluxSender(target, failures.append, lambda: None, failures.append)
        sender.send(lines)
        sender.close()
        wait_until(lambda: bool(influx.rows("SELECT * FROM drgpu_gpu")), "the GPU's point")
        wait_until(lambda: bool(influx.rows("SELECT * FROM drgpu_violations")), "violations")
        runs = {row["run"] for row in influx.rows("SELECT * FROM drgpu_violations GROUP BY *")}
    assert failures == []
    assert "" not in runs and None not in runs


@contextmanager
def trickling_receiver() -> Iterator[int]:
    """A port on 127.0.0.1 whose every connection gets an HTTP answer, one byte a second."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                connection, _ = server.accept()
                with connection:
                    for byte in b"HTTP/1.1 204 No Content\r\n\r\n":
                        if stop.wait(1.0):
                            break
                        connection.send(bytes([byte]))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()


def test_a_trickling_receiver_holds_no_refresh_and_each_write_has_a_deadline() -> None:
    failures: list[str] = []
    warnings: list[str] = []
    with trickling_receiver() as port:
        target = InfluxTarget("http", "127.0.0.1", port, "/write?db=x")
        sender = InfluxSender(target, failures.append, lambda: None, warnings.append)
        started = time.monotonic()
        for _ in range(metrics_export.QUEUED + 3):
            sender.send(["m f=1"])
        assert time.monotonic() - started < 0.5  # the refreshes never wait for the writes
        sender.close()  # (it waits a while; the writes left go on, and fail once this ends)
        seen = list(failures)
    assert seen and all("timed out" in f or "no answer in 2 s" in f for f in seen)
    assert any("refresh(es) not written" in warning for warning in warnings)


@pytest.mark.parametrize(
    "url",
    [
        "http://user:sekrit@127.0.0.1:1/write?db=x",
        "https://user:sekrit@127.0.0.1:1/write?db=x",
        "udp://user:sekrit@127.0.0.1:1",
        "http://user:sekrit@127.0.0.1:bad/write?db=x",
        "ftp://user:sekrit@127.0.0.1:1/write?db=x",
        "user:sekrit@127.0.0.1:1",
        "http://127.0.0.1:1/write?u=user&p=sekrit",
    ],
)
def test_a_password_in_the_influx_url_is_never_printed(
    cli: Cli, snapshots: list[Any], url: str
) -> None:
    snapshots.append(a_status(G0))
    code, _, err = cli("status", "--watch", "--count", "2", "--interval", "0.1", "--influx", url)
    assert "sekrit" not in err
    assert err.startswith("drgpu: error: --influx") or "p=***" in err, err
    assert code in (0, 2)


def test_a_password_in_the_query_is_not_printed_when_a_write_fails(
    cli: Cli, snapshots: list[Any]
) -> None:
    snapshots.append(a_status(G0))
    url = f"http://127.0.0.1:{free_port()}/write?db=x&p=sekrit"
    code, _, err = cli("status", "--watch", "--count", "2", "--interval", "0.1", "--influx", url)
    assert code == 0
    assert "cannot send to" in err and "p=***" in err and "sekrit" not in err


# --- --prometheus -------------------------------------------------------------------------


def test_a_bad_accept_header_prints_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    endpoint = PrometheusEndpoint("127.0.0.1", 0)
    try:
        for accept in ("application/openmetrics-text; version=x;;=", "\x00", "*/*; q=nan"):
            request = urllib.request.Request(
                f"http://127.0.0.1:{endpoint.port}/metrics", headers={"Accept": accept}
            )
            with contextlib.suppress(OSError):
                urllib.request.urlopen(request, timeout=5).read()
    finally:
        endpoint.close()
    assert "Traceback" not in capfd.readouterr().err


def test_idle_sockets_hold_a_bounded_number_of_threads() -> None:
    endpoint = PrometheusEndpoint("127.0.0.1", 0)
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", endpoint.port)) for _ in range(60)]
    try:
        time.sleep(0.5)
        assert threading.active_count() - before <= metrics_export.SCRAPERS
    finally:
        for each in idle:
            each.close()
        endpoint.close()


@pytest.mark.parametrize("address", ["0:9400", "*:9400", "0.0.0.0:9400", "[::]:9400"])
def test_every_address_binds_are_said(address: str) -> None:
    host, _ = metrics.prometheus_address(address)
    assert host in metrics.EVERY_ADDRESS


def test_the_watch_says_it_listens_on_every_address(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.append(a_status(G0))
    port = free_port()
    code, _, err = cli("status", "--watch", "--count", "1", "--prometheus", f"*:{port}")
    assert code == 0
    assert "every address" in err


@pytest.mark.parametrize("address", ["²", "1:²", "٣"])
def test_a_port_that_is_no_ascii_number_is_exit_2(
    cli: Cli, snapshots: list[Any], address: str
) -> None:
    snapshots.append(a_status(G0))
    code, _, err = cli("status", "--watch", "--count", "1", "--prometheus", address)
    assert code == 2
    assert err.startswith("drgpu: error: --prometheus") and "Traceback" not in err
