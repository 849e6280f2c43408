"""A stand-in Docker engine that runs no container: what `drgpu status` and `drgpu gpus`
ask of an engine, answered on a unix socket with nothing (the real-GPU suite needs no
Docker, and tests on the fake driver check the same path)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def serving_no_containers(path: Path) -> Iterator[str]:
    """Serve the engine API on the unix socket `path` while the block runs: every container
    listing is empty, anything else is 404. Yields the DOCKER_HOST to use."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    stop = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection, connection.makefile("rb") as reader:
            while not stop.is_set():
                request = reader.readline()
                if not request:
                    return
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode().partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                reader.read(length)
                listing = request.split()[1].startswith(b"/containers/json")
                body = b"[]" if listing else b'{"message": "not in this stand-in engine"}'
                status = b"200 OK" if listing else b"404 Not Found"
                connection.sendall(
                    b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                )

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        server.close()
