"""A hostile engine on a unix socket (issue 29, item 2): answers that break HTTP (a short
body, EOF inside a chunk, a huge header, an endless chunked body, a drip, no JSON, an API
too old) are each one sentence and exit 5, within bounded time and memory. And the small
inputs of item 7: each one sentence and exit 2."""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drgpu.errors import DockerError
from drgpu.host import docker_api
from drgpu.host.docker_api import Address, Connection
from drgpu.host.state_files import override_path
from tests.adversarial.helpers import assert_sound
from tests.support.runners import run_main

OK = b"HTTP/1.1 200 OK\r\n"
Send = Callable[[socket.socket], None]


def once(data: bytes) -> Send:
    return lambda peer: peer.sendall(data)


def forever(head: bytes, piece: bytes) -> Send:
    def send(peer: socket.socket) -> None:
        peer.sendall(head)
        while True:
            peer.sendall(piece)

    return send


def drip(peer: socket.socket) -> None:
    for byte in OK + b"Content-Length: 2\r\n\r\n[]":
        peer.sendall(bytes([byte]))
        time.sleep(0.3)


MODES: dict[str, Send] = {
    "short body": once(OK + b"Content-Length: 100\r\n\r\n[]"),
    "eof inside a chunk": once(OK + b"Transfer-Encoding: chunked\r\n\r\n10\r\n[]"),
    "bad chunk size": once(OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n[]\r\n0\r\n\r\n"),
    "bad json": once(OK + b"Content-Length: 3\r\n\r\n{[x"),
    "a list for an object": once(OK + b"Content-Length: 2\r\n\r\n[]"),
    "an empty 200": once(OK + b"Content-Length: 0\r\n\r\n"),
    "created, no id": once(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"),
    "no status": once(b"garbage\r\n\r\n"),
    "bad length": once(OK + b"Content-Length: -5\r\n\r\n"),
    "old api": once(OK + b"Api-Version: 1.24\r\nContent-Length: 2\r\n\r\n[]"),
    "huge header": forever(OK + b"X-Junk: ", b"a" * 65536),
    "endless chunks": forever(
        OK + b"Transfer-Encoding: chunked\r\n\r\n", b"100000\r\n" + b"[" * 0x100000 + b"\r\n"
    ),
}


@contextlib.contextmanager
def hostile(path: Path, send: Send) -> Iterator[None]:
    """An engine at `path` answering every request with `send` (until drgpu hangs up)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    server.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                peer, _ = server.accept()
            except TimeoutError:
                continue
            with peer, contextlib.suppress(OSError):
                peer.recv(65536)
                send(peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)
        server.close()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_hostile_answer_is_one_sentence_and_exit_5(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "d.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setenv("DRGPU_COMPOSE", "/bin/true")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "system.env").write_text("DR_RUN_ID=0\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with hostile(sock, MODES[mode]):
        ran = run_main("down", "--env-file", tmp_path / "system.env")
    assert time.monotonic() - started < 30
    assert_sound(ran, 5)
    assert "the Docker engine" in ran.err
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 3 * docker_api.MAX_BODY_BYTES / 2**20


def test_an_engine_dripping_bytes_is_given_up_at_the_calls_deadline(tmp_path: Path) -> None:
    sock = tmp_path / "d.sock"
    with hostile(sock, drip):
        connection = Connection(Address(socket_path=str(sock)))
        started = time.monotonic()
        with pytest.raises(DockerError, match=r"did not answer GET /containers/json within 1s"):
            connection.call("GET", "/containers/json", timeout_s=1)
        connection.close()
    assert time.monotonic() - started < 2


# --- item 7: small inputs -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--env-file", ""),
        ("down", "--env-file", "system.env", "--run-env", ""),
        ("cuda-check", "--expect-uuid", ""),
        ("cuda-check", "--expect-uuid", "GPU-1", "--expect-uuid", " "),
    ],
)
def test_an_empty_path_or_uuid_is_a_usage_error(
    args: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "system.env").write_text("DR_RUN_ID=0\n")
    ran = run_main(*args)
    assert_sound(ran, 2)
    assert "--env-file" in ran.err or "--run-env" in ran.err or "--expect-uuid" in ran.err


def test_down_refuses_an_override_drgpu_did_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("DRGPU_COMPOSE", "/bin/true")
    settings = tmp_path / "system.env"
    settings.write_text("DR_RUN_ID=0\n")
    planted = override_path(settings, "deepracer-0")
    planted.parent.mkdir()
    planted.write_text("services: {evil: {image: alpine}}\n")
    ran = run_main("down", "--env-file", settings)
    assert_sound(ran, 2)
    assert f"refusing to hand {planted} to Compose: drgpu did not write it" in ran.err


def test_a_created_answer_without_an_id_is_an_error() -> None:
    for body in (b"{}", b'{"Id": 5}', b"[]"):
        with pytest.raises(DockerError, match=r"answer to create x (names no Id|is not a JSON)"):
            docker_api.Answer(201, body).created_id("create x")
