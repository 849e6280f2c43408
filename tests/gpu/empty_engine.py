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
    listing is empty, `/info` and `/nodes` say no swarm, anything else is 404. Yields the
    DOCKER_HOST to use."""
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
                path = request.split()[1]
                listing = path.startswith(b"/containers/json")
                info = path.startswith(b"/info")  # no swarm: status asks before it lists
                body = b"[]" if listing else b'{"Swarm": {}}' if info else b'{"message": "no"}'
                status = b"200 OK" if listing or info else b"404 Not Found"
                if path.startswith(b"/nodes"):  # as an engine that is no swarm manager
                    status = b"503 Service Unavailable"
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
