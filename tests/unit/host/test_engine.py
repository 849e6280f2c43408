"""drgpu/host/engine.py: the engine's listing of drgpu's containers, asked over its socket."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from drgpu.errors import DockerError
from drgpu.host import engine

M40 = "GPU-6f0c2a4e-1b7d-4c2e-9f1a-0c3d5e7f9a11"  # gtx_m40 index 0


def answer(status: str, body: object) -> bytes:
    data = json.dumps(body).encode()
    return f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\n\r\n".encode() + data


def serve_once(path: Path, reply: bytes) -> tuple[threading.Thread, list[bytes]]:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    seen: list[bytes] = []

    def run() -> None:
        connection, _ = server.accept()
        with connection:
            seen.append(connection.recv(65536))
            connection.sendall(reply)
        server.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


def test_drgpu_labels_asks_the_engine_on_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.sock"
    listing = [{"State": "running", "Labels": {"drgpu.run_id": "a", "drgpu.gpus": M40}}]
    thread, seen = serve_once(path, answer("200 OK", listing))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    assert engine.drgpu_labels() == [("running", {"drgpu.run_id": "a", "drgpu.gpus": M40})]
    thread.join(5)
    request = seen[0].decode()
    assert request.startswith("GET /containers/json?all=1&filters=")
    assert "drgpu.run_id" in request.replace("%22", '"').replace("%2E", ".")


def test_drgpu_labels_turns_an_engine_error_into_a_docker_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.sock"
    thread, _ = serve_once(path, answer("500 Internal Server Error", {"message": "boom"}))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    with pytest.raises(DockerError, match=r"refused to list containers: boom"):
        engine.drgpu_labels()
    thread.join(5)


def test_drgpu_labels_without_an_engine_is_a_docker_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    with pytest.raises(DockerError, match=r"cannot reach the Docker engine at .*absent\.sock"):
        engine.drgpu_labels()


def test_a_cdi_device_request_and_the_engines_cdi_facts_are_read() -> None:
    """A container started with `driver: cdi` (Docker 25+), and what /info says of CDI and
    the cgroup driver (Docker 28.2+ lists the devices it discovered)."""
    attrs = {
        "Id": "c1",
        "Name": "/deepracer-0-robomaker-1",
        "Config": {"Labels": {"com.docker.compose.service": "robomaker"}, "Env": []},
        "State": {"Status": "running"},
        "HostConfig": {
            "DeviceRequests": [
                {"Driver": "cdi", "Count": 0, "DeviceIDs": [f"nvidia.com/gpu={M40}"]}
            ]
        },
    }
    [request] = engine._facts(attrs).device_requests
    assert (request.driver, request.device_ids, request.capabilities) == (
        "cdi",
        (f"nvidia.com/gpu={M40}",),
        (),
    )
    info = {
        "ServerVersion": "28.3.0",
        "Runtimes": {"runc": {}},
        "DefaultRuntime": "runc",
        "DiscoveredDevices": [{"Source": "cdi", "ID": f"nvidia.com/gpu={M40}"}],
        "CgroupDriver": "systemd",
    }
    daemon = engine.daemon_facts_of(info, {"api-version": "1.51"})
    assert (daemon.version, daemon.api_version) == ("28.3.0", "1.51")
    assert daemon.discovered_devices == (f"cdi:nvidia.com/gpu={M40}",)
    assert daemon.cgroup_driver == "systemd"
    older = engine.daemon_facts_of({"ServerVersion": "20.10.24"}, {})
    assert (older.discovered_devices, older.cgroup_driver) == ((), "")


def test_the_engines_times_are_read_to_the_microsecond_and_its_zero_time_is_none() -> None:
    assert engine._timestamp("2026-01-01T00:00:00.123456789Z") == 1767225600.123456
    assert engine._timestamp("2026-01-01T01:00:00+01:00") == 1767225600.0
    assert engine._timestamp("0001-01-01T00:00:00Z") is None
    assert engine._timestamp("") is None
