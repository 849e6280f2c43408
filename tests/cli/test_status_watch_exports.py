"""`drgpu status --watch` with `--influx`, `--prometheus` and `--on-violation` through
drgpu's own main: bad values are exit 2 with one line, before anything starts; a refresh
the engine or NVML fails is said once and skipped, and the watch goes on. The gathering is
replaced (tests/cli/test_status.py's snapshots); the exporters are real."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from drgpu.commands import status
from drgpu.errors import DockerError, NvmlUnavailableError
from drgpu.host import docker_api, nvml
from tests.cli import test_status
from tests.cli.test_status import G0, a_status
from tests.support.metrics_servers import free_port
from tests.support.runners import Cli

snapshots = test_status.snapshots  # the fixture: each snapshot the CLI takes, in order


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--influx", "udp://127.0.0.1"], "--influx 'udp://127.0.0.1' is not a URL"),
        (["--influx", "http://h:1/write"], "an HTTP URL is .../write?db=NAME"),
        (["--prometheus", "nine"], "--prometheus 'nine' is no address and port"),
        (["--on-violation", "no-such-program-here x"], "no-such-program-here: command not found"),
        (["--on-violation", "'unclosed"], '--on-violation "\'unclosed": No closing quotation'),
        (["--on-violation", ""], "--on-violation needs a command"),
    ],
)
def test_bad_exporter_values_are_exit_2_in_one_line(
    cli: Cli, snapshots: list[Any], args: list[str], said: str
) -> None:
    snapshots.append(a_status(G0))
    code, out, err = cli("status", "--watch", "--count", "1", *args)
    assert (code, out) == (2, "")
    assert err.startswith("drgpu: error: ") and said in err.splitlines()[0], err
    assert "Traceback" not in err


def test_exporters_need_watch(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.append(a_status(G0))
    code, _, err = cli("status", "--influx", "udp://127.0.0.1:8092")
    assert code == 2
    assert err == "drgpu: error: --influx, --prometheus and --on-violation need --watch\n"


def test_a_busy_prometheus_port_is_exit_2(cli: Cli, snapshots: list[Any]) -> None:
    snapshots.append(a_status(G0))
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        code, _, err = cli("status", "--watch", "--count", "1", "--prometheus", str(port))
    assert code == 2
    assert f"--prometheus 127.0.0.1:{port}: cannot listen there" in err


def test_the_watch_says_once_when_the_engine_or_nvml_fails_and_goes_on(
    cli: Cli, snapshots: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ok = a_status(G0)
    script: list[Any] = [
        ok,
        DockerError("cannot reach the Docker engine at /run/docker.sock: Connection refused"),
        DockerError("cannot reach the Docker engine at /run/docker.sock: Connection refused"),
        ok,
        NvmlUnavailableError("NVML failed: Unknown Error"),
        ok,
        a_status("GPU-elsewhere"),
    ]
    restarts: list[bool] = []

    class Reader:
        health = ()  # no GPU health: nothing is charged but time

        def __init__(self, session: Any, engine: Any, run_id: str | None = None, *_: Any) -> None:
            self.restart_nvml = False

        def snapshot(self) -> Any:
            restarts.append(self.restart_nvml)
            step = script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step

    monkeypatch.setattr(status, "Reader", Reader)
    monkeypatch.setattr(nvml, "EventFollower", lambda session: None)  # no NVML events here
    code, out, err = cli("status", "--watch", "--json", "--count", "7", "--interval", "0.1")
    assert code == 6  # the last refresh shown had a violation
    assert len(out.splitlines()) == 4  # the failed refreshes are skipped
    assert err.splitlines()[:4] == [
        "drgpu: warning: cannot reach the Docker engine at /run/docker.sock: Connection refused;"
        " the Docker engine: retrying at every refresh",
        "drgpu: the Docker engine is back",
        "drgpu: warning: NVML failed: Unknown Error; NVML: retrying at every refresh",
        "drgpu: NVML is back",
    ]
    assert restarts == [False, False, False, False, False, True, False]  # NVML restarted once


def test_the_first_refresh_still_fails(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    class Reader:
        health = ()  # no GPU health: nothing is charged but time

        def __init__(self, session: Any, engine: Any, run_id: str | None = None, *_: Any) -> None:
            self.restart_nvml = False

        def snapshot(self) -> Any:
            raise DockerError("cannot reach the Docker engine at /nowhere: No such file")

    @contextmanager
    def fake_session() -> Iterator[Any]:
        yield object()

    monkeypatch.setattr(nvml, "nvml_session", fake_session)
    monkeypatch.setattr(docker_api, "connected", fake_session)
    monkeypatch.setattr(status, "Reader", Reader)
    monkeypatch.setattr(nvml, "EventFollower", lambda session: None)  # no NVML events here
    code, _, err = cli("status", "--watch", "--count", "3", "--interval", "0.1")
    assert code == 5
    assert err.startswith("drgpu: error: cannot reach the Docker engine at /nowhere")


def test_on_violation_runs_the_command_once_per_new_violation(
    cli: Cli, snapshots: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshots.extend([a_status(G0), a_status("GPU-elsewhere")])  # then the violation stays
    monkeypatch.setattr(docker_api, "_settings", {"DOCKER_HOST": "unix:///drgpus.sock"})
    record = tmp_path / "ran"
    hook = tmp_path / "hook.py"
    hook.write_text(  # its `docker` would speak to drgpu's engine
        "import os, sys\n"
        f"with open({str(record)!r}, 'a') as out:\n"
        "    assert os.environ['DOCKER_HOST'] == 'unix:///drgpus.sock'\n"
        "    out.write(os.environ['DRGPU_VIOLATION_KIND'] + ' ' + sys.stdin.read())\n"
    )
    code, _, err = cli(
        "status", "--watch", "--json", "--count", "5", "--interval", "0.1",
        "--on-violation", f"{sys.executable} {hook}",
    )  # fmt: skip
    assert code == 6
    assert "warning" not in err
    ran = record.read_text().splitlines()
    assert len(ran) == 2  # two violations (wrong-gpu, missing-gpu), each new once
    assert ran[0].startswith('wrong-gpu {"kind": "wrong-gpu", "message": "PID 1234 of run 0')
    assert ran[1].startswith('missing-gpu {"kind": "missing-gpu"')


def test_on_violation_failures_show_no_secret_of_the_shell(
    cli: Cli, snapshots: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # status reads no settings: the activated shell's exported secrets are masked all the same
    monkeypatch.setenv("DR_MINIO_PASSWORD", "minioPWvv33")
    monkeypatch.setenv("DR_REMOTE_URL", "http://bob:urlPWtt22@minio.local:9000")
    snapshots.extend([a_status(G0), a_status("GPU-elsewhere")])
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import os, sys\n"
        "print('leaking', os.environ['DR_MINIO_PASSWORD'], os.environ['DR_REMOTE_URL'])\n"
        "sys.exit(1)\n"
    )
    code, _, err = cli(
        "status", "--watch", "--json", "--count", "3", "--interval", "0.1",
        "--on-violation", f"{sys.executable} {hook}",
    )  # fmt: skip
    assert code == 6
    assert "exited 1: leaking **** http://bob:****@minio.local:9000" in err
    assert "minioPWvv33" not in err and "urlPWtt22" not in err
