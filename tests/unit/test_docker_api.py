"""host.docker_api: where DOCKER_HOST points, HTTP/1.1 kept alive on the engine's socket,
and the log and exec streams' frames."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.docker_api import Address, Connection, engine_address


def test_the_local_socket_is_the_default() -> None:
    assert engine_address({}) == Address(socket_path="/var/run/docker.sock")
    assert engine_address({"DOCKER_HOST": "unix:///run/d.sock"}).socket_path == "/run/d.sock"


def test_a_tcp_host_is_plain_http_unless_tls_is_asked_for() -> None:
    plain = engine_address({"DOCKER_HOST": "tcp://10.0.0.5:2375"})
    assert (plain.host, plain.port, plain.tls) == ("10.0.0.5", 2375, False)
    tls = engine_address({"DOCKER_HOST": "tcp://gpu-box", "DOCKER_TLS_VERIFY": "1"})
    assert (tls.host, tls.port, tls.tls, tls.tls_verify) == ("gpu-box", 2376, True, True)
    assert str(tls) == "https://gpu-box:2376"


def test_an_ssh_host_is_refused_with_a_sentence() -> None:
    with pytest.raises(DockerError, match=r"DOCKER_HOST ssh:// is not supported") as caught:
        engine_address({"DOCKER_HOST": "ssh://me@gpu-box"})
    assert caught.value.hint is not None and "ssh -NL" in caught.value.hint


def serve(path: Path, answers: list[bytes], *, close_after_each: bool) -> list[bytes]:
    """A fake engine on a unix socket: each request gets the next answer; what it heard
    (one entry per connection accepted)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    heard: list[bytes] = []

    def run() -> None:
        pending = list(answers)
        while pending:
            connection, _ = server.accept()
            heard.append(b"")
            with connection:
                while pending:
                    heard[-1] += connection.recv(65536)
                    connection.sendall(pending.pop(0))
                    if close_after_each:
                        break
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return heard


def test_one_connection_serves_many_calls(tmp_path: Path) -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'3\r\n[{"\r\na\r\nId": "x"}]\r\n0\r\n\r\n'
    )
    heard = serve(tmp_path / "d.sock", [sized, chunked], close_after_each=False)
    connection = Connection(Address(socket_path=str(tmp_path / "d.sock")))
    try:
        assert connection.call("GET", "/containers/json").json() == []
        assert connection.call("GET", "/containers/json").json() == [{"Id": "x"}]
    finally:
        connection.close()
    assert len(heard) == 1 and heard[0].count(b"GET /containers/json HTTP/1.1") == 2


def test_a_connection_the_engine_closed_is_opened_again(tmp_path: Path) -> None:
    closing = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    heard = serve(tmp_path / "d.sock", [closing, closing], close_after_each=True)
    connection = Connection(Address(socket_path=str(tmp_path / "d.sock")))
    try:
        assert connection.call("DELETE", "/volumes/x").status == 204
        assert connection.call("DELETE", "/volumes/y").status == 204
    finally:
        connection.close()
    assert len(heard) == 2


def test_an_engine_that_is_not_there_is_a_sentence(tmp_path: Path) -> None:
    connection = Connection(Address(socket_path=str(tmp_path / "absent.sock")))
    with pytest.raises(DockerError, match=r"^cannot reach the Docker engine at .*absent\.sock: "):
        connection.call("GET", "/info")


def test_a_multiplexed_stream_is_unframed_in_order_and_a_raw_one_kept() -> None:
    def frame(stream: int, payload: bytes) -> bytes:
        return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    stream = frame(1, b"out 1\n") + frame(2, b"err 1\n") + frame(1, b"out 2\n")
    assert docker_api.unframed(stream) == b"out 1\nerr 1\nout 2\n"
    assert docker_api.unframed(b"a TTY's raw output\n") == b"a TTY's raw output\n"
