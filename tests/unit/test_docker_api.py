"""host.docker_api: where DOCKER_HOST points, HTTP/1.1 kept alive on the engine's socket,
and the log and exec streams' frames."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from pathlib import Path

import pytest

from drgpu.errors import DockerError
from drgpu.host import docker_api, swarm_engine
from drgpu.host.docker_api import Address, Connection, engine_address


def test_the_local_socket_is_the_default(tmp_path: Path) -> None:
    alone = {"DOCKER_CONFIG": str(tmp_path)}
    assert engine_address(alone) == Address(socket_path="/var/run/docker.sock")
    assert engine_address({**alone, "DOCKER_HOST": "unix://"}).socket_path == "/var/run/docker.sock"
    assert engine_address({"DOCKER_HOST": "unix:///run/d.sock"}).socket_path == "/run/d.sock"


def test_a_tcp_host_is_plain_http_unless_tls_is_asked_for_as_the_cli_reads_it() -> None:
    plain = engine_address({"DOCKER_HOST": "tcp://10.0.0.5:2375"})
    assert (plain.host, plain.port, plain.tls) == ("10.0.0.5", 2375, False)
    tls = engine_address({"DOCKER_HOST": "tcp://gpu-box", "DOCKER_TLS_VERIFY": "1"})
    assert (tls.host, tls.port, tls.tls, tls.tls_verify) == ("gpu-box", 2375, True, True)
    assert str(tls) == "https://gpu-box:2375"
    # DOCKER_CERT_PATH alone is plain HTTP, as for the CLI; DOCKER_TLS is TLS, unverified.
    certs = engine_address({"DOCKER_HOST": "tcp://gpu-box", "DOCKER_CERT_PATH": "/c"})
    assert not certs.tls
    unverified = engine_address({"DOCKER_HOST": "tcp://b:1", "DOCKER_TLS": "1"})
    assert (unverified.tls, unverified.tls_verify) == (True, False)
    assert unverified.exported()["DOCKER_TLS"] == "1"
    assert "DOCKER_TLS_VERIFY" not in unverified.exported()
    # TLS without DOCKER_HOST is the CLI's TLS default host, not the local socket.
    default = engine_address({"DOCKER_TLS_VERIFY": "1", "DOCKER_CONFIG": "/nowhere"})
    assert (default.host, default.port, default.tls_verify) == ("localhost", 2376, True)


def test_docker_host_is_parsed_as_the_cli_parses_it() -> None:
    six = engine_address({"DOCKER_HOST": "tcp://[::1]"})
    assert (six.host, six.port, str(six)) == ("::1", 2375, "http://[::1]:2375")
    assert six.exported() == {"DOCKER_HOST": "tcp://[::1]:2375"}
    bare = engine_address({"DOCKER_HOST": "box:4000"})
    assert (bare.host, bare.port) == ("box", 4000)
    for bad in ("tcp://box:port", "tcp://box:99999", "http://box", "unix://tcp://x"):
        with pytest.raises(DockerError, match="DOCKER_HOST"):
            engine_address({"DOCKER_HOST": bad})


def write_context(config: Path, name: str, host: str, *, skip: bool = False) -> Path:
    """A context as `docker context create` stores it; its TLS folder (not made)."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = config / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": skip}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Endpoints": {"docker": endpoint}}))
    return config / "contexts" / "tls" / digest / "docker"


def test_a_context_is_read_when_docker_host_is_unset(tmp_path: Path) -> None:
    write_context(tmp_path, "rootless", "unix:///run/user/1000/docker.sock")
    tls_dir = write_context(tmp_path, "remote", "tcp://10.1.2.3:2376")
    tls_dir.mkdir(parents=True)
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "rootless"}))
    base = {"DOCKER_CONFIG": str(tmp_path)}
    assert engine_address(base).socket_path == "/run/user/1000/docker.sock"
    remote = engine_address({**base, "DOCKER_CONTEXT": "remote"})
    assert (remote.host, remote.port, remote.tls, remote.tls_verify) == (
        "10.1.2.3",
        2376,
        True,
        True,
    )
    assert remote.cert_dir == str(tls_dir)
    assert (
        engine_address({**base, "DOCKER_CONTEXT": "default"}).socket_path == "/var/run/docker.sock"
    )
    over = {**base, "DOCKER_CONTEXT": "remote", "DOCKER_HOST": "unix:///x.sock"}
    assert engine_address(over).socket_path == "/x.sock"
    with pytest.raises(DockerError, match="docker context 'gone' does not exist"):
        engine_address({**base, "DOCKER_CONTEXT": "gone"})


def test_programs_are_handed_the_same_engine_and_no_context(tmp_path: Path) -> None:
    tls_dir = write_context(tmp_path, "remote", "tcp://10.1.2.3:2376")
    tls_dir.mkdir(parents=True)
    handed = docker_api.program_environment(
        {"DOCKER_CONFIG": str(tmp_path), "DOCKER_CONTEXT": "remote", "DOCKER_CERT_PATH": "/x"}
    )
    assert "DOCKER_CONTEXT" not in handed
    assert handed["DOCKER_HOST"] == "tcp://10.1.2.3:2376"
    assert (handed["DOCKER_TLS_VERIFY"], handed["DOCKER_CERT_PATH"]) == ("1", str(tls_dir))


def test_system_env_names_the_engine_of_every_call_and_of_the_swarm_proof_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/shell.sock")
    monkeypatch.delenv("DRGPU_NODE_SOCKET", raising=False)
    docker_api.use_settings({"DOCKER_HOST": "unix:///run/system-env.sock"})
    try:
        assert docker_api.address().socket_path == "/run/system-env.sock"
        job = swarm_engine._job("p", "probe", "node1", "image", [], [])
        socket_mount = job["TaskTemplate"]["ContainerSpec"]["Mounts"][0]
        assert socket_mount["Source"] == "/run/system-env.sock"
    finally:
        docker_api.use_settings({})


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
        assert connection.call("GET", "/containers/json").checked("list", 200, kind=list) == []
        assert connection.call("GET", "/containers/json").checked("list", 200, kind=list) == [
            {"Id": "x"}
        ]
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


def test_an_engine_socket_nobody_listens_on_is_refused_not_closed(tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX)  # bound, never listening: dockerd died
    stale.bind(str(tmp_path / "stale.sock"))
    connection = Connection(Address(socket_path=str(tmp_path / "stale.sock")))
    with stale, pytest.raises(DockerError, match=r"stale\.sock: Connection refused$"):
        connection.call("GET", "/info")


def test_a_multiplexed_stream_is_unframed_in_order_and_a_raw_one_kept() -> None:
    def frame(stream: int, payload: bytes) -> bytes:
        return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload

    stream = frame(1, b"out 1\n") + frame(2, b"err 1\n") + frame(1, b"out 2\n")
    assert docker_api.unframed(stream) == b"out 1\nerr 1\nout 2\n"
    assert docker_api.unframed(b"a TTY's raw output\n") == b"a TTY's raw output\n"
